//! Task and subtask states, and their `Status.<State>` file names.
//!
//! The state of a task or subtask is the name of an empty marker file in its
//! folder, so one listing shows progress. A state change writes the new
//! marker before it deletes the old one; a crash in between leaves two
//! markers, and readers take the one furthest along ([`TaskState::rank`]),
//! which is always the newer because transitions only move forward.

use std::fmt;

pub const STATUS_PREFIX: &str = "Status.";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("{0:?} is not a status file name (expected `Status.<State>`)")]
    NotStatus(String),
    #[error("unknown state {0:?}")]
    Unknown(String),
}

macro_rules! state_enum {
    ($(#[$m:meta])* $name:ident { $($v:ident => $rank:expr),+ $(,)? } terminal: [$($t:ident),*]) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name { $($v),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),+];

            pub fn as_str(&self) -> &'static str {
                match self { $($name::$v => stringify!($v)),+ }
            }

            pub fn parse(s: &str) -> Result<Self, StateError> {
                match s {
                    $(stringify!($v) => Ok($name::$v),)+
                    _ => Err(StateError::Unknown(s.escape_debug().to_string())),
                }
            }

            /// How far along the lifecycle this state is; a marker with a
            /// higher rank supersedes one with a lower rank.
            pub fn rank(&self) -> u8 {
                match self { $($name::$v => $rank),+ }
            }

            pub fn is_terminal(&self) -> bool {
                matches!(self, $($name::$t)|*)
            }

            /// `Status.<State>`
            pub fn file_name(&self) -> String {
                format!("{STATUS_PREFIX}{}", self.as_str())
            }

            /// Parses a `Status.<State>` file name.
            pub fn from_file_name(name: &str) -> Result<Self, StateError> {
                let state = name
                    .strip_prefix(STATUS_PREFIX)
                    .ok_or_else(|| StateError::NotStatus(name.escape_debug().to_string()))?;
                Self::parse(state)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = StateError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }
    };
}

state_enum!(
    /// A main task's state.
    TaskState { Init => 0, Running => 1, Done => 2, Failed => 2, Cancel => 2 }
    terminal: [Done, Failed, Cancel]
);

state_enum!(
    /// A subtask's state.
    SubtaskState { Init => 0, Running => 1, Success => 2, Failed => 2, Cancel => 2 }
    terminal: [Success, Failed, Cancel]
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_round_trip() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::from_file_name(&s.file_name()).unwrap(), *s);
        }
        for s in SubtaskState::ALL {
            assert_eq!(SubtaskState::from_file_name(&s.file_name()).unwrap(), *s);
        }
        assert_eq!(SubtaskState::from_file_name("Status.Success").unwrap(), SubtaskState::Success);
        assert!(TaskState::from_file_name("Status.Bogus").is_err());
        assert!(TaskState::from_file_name("TaskInfo.pc.db").is_err());
        assert!(TaskState::from_file_name("Status.").is_err());
    }

    #[test]
    fn terminal_states_outrank_running() {
        assert!(TaskState::Done.rank() > TaskState::Running.rank());
        assert!(TaskState::Running.rank() > TaskState::Init.rank());
        assert!(TaskState::Cancel.is_terminal() && !TaskState::Running.is_terminal());
    }
}
