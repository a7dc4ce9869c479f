//! Validated path segments.
//!
//! A [`Name`] is safe to use as one segment of a path below the root: it can
//! never escape its parent (`..`, `/`), hide (`.`), or confuse a listing
//! (control characters, NUL). Every name read from the tree or the command line
//! goes through [`Name::parse`] before it is used in a path.

use std::fmt;

/// Longest name accepted, in bytes (the common file-system limit).
pub const MAX_NAME_BYTES: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("empty name")]
    Empty,
    #[error("name {0:?} is longer than {MAX_NAME_BYTES} bytes")]
    TooLong(String),
    #[error("name {0:?} is `.` or `..`")]
    Dots(String),
    #[error("name {0:?} contains a path separator")]
    Separator(String),
    #[error("name {0:?} contains a control character")]
    Control(String),
    #[error("node id {0:?} may only contain ASCII letters, digits, `_`, `-` and `.`, and must not start with `.`")]
    NodeCharset(String),
}

/// One validated path segment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Name(String);

impl Name {
    pub fn parse(s: &str) -> Result<Self, NameError> {
        if s.is_empty() {
            return Err(NameError::Empty);
        }
        if s.len() > MAX_NAME_BYTES {
            return Err(NameError::TooLong(s.chars().take(40).collect()));
        }
        if s == "." || s == ".." {
            return Err(NameError::Dots(s.to_string()));
        }
        if s.contains('/') || s.contains('\\') {
            return Err(NameError::Separator(s.to_string()));
        }
        if s.chars().any(|c| c.is_control()) {
            return Err(NameError::Control(s.escape_debug().to_string()));
        }
        Ok(Name(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Name {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Name::parse(s)
    }
}

impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Name::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Whether text output must escape `c`: control characters (a name must
/// not forge a line of output) and the characters that change the
/// direction or order of the text around them on a terminal (bidirectional
/// embeddings, overrides and isolates, directional marks, line and
/// paragraph separators).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{2028}' | '\u{2029}')
        || ('\u{202A}'..='\u{202E}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// A name, path or message as text output shows it: every character of
/// [`needs_escape`] written as Rust writes it in a string (`\n`, `\t`,
/// `\u{202e}`), everything else as it is. `Name`s hold no control
/// characters, but may hold the others; names read from listings or files
/// may hold anything.
pub fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A node's identity, like the seed's `xcloud24_9876` (`<host>_<port>`).
///
/// Stricter than [`Name`]: node ids appear in file names that are split on
/// `.` elsewhere, so they are restricted to a portable charset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct NodeId(Name);

impl NodeId {
    pub fn parse(s: &str) -> Result<Self, NameError> {
        let name = Name::parse(s)?;
        let ok = !s.starts_with('.')
            && s.len() <= 128
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !ok {
            return Err(NameError::NodeCharset(s.escape_debug().to_string()));
        }
        Ok(NodeId(name))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn as_name(&self) -> &Name {
        &self.0
    }

    /// A stable 32-bit code for the node (FNV-1a of its id): the first part of
    /// the dotted task id, and the key of the node on the hash ring.
    pub fn code(&self) -> u32 {
        fnv1a32(self.as_str().as_bytes())
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for NodeId {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeId::parse(s)
    }
}

impl<'de> serde::Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        NodeId::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// 32-bit FNV-1a. Chosen because it is tiny, stable across versions and
/// platforms, and easy to reproduce in a shell script.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn output_shows_control_and_bidi_characters_escaped() {
        assert_eq!(super::shown("db/public/events"), "db/public/events");
        assert_eq!(super::shown("x\nok: no anomalies"), "x\\nok: no anomalies");
        assert_eq!(super::shown("evil\u{202E}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(super::shown("a\u{2067}b\u{2069}\t\u{1b}[31m"), "a\\u{2067}b\\u{2069}\\t\\u{1b}[31m");
        assert_eq!(super::shown("état"), "état");
    }

    use super::*;

    #[test]
    fn rejects_escapes_and_controls() {
        for bad in ["", ".", "..", "a/b", "../x", "a\\b", "a\0b", "a\nb", "\u{7f}"] {
            assert!(Name::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Name::parse(&"x".repeat(256)).is_err());
        assert!(Name::parse(&"x".repeat(255)).is_ok());
        for good in ["db1", "dt=2024-01-01", "part.0", "表"] {
            assert_eq!(Name::parse(good).unwrap().as_str(), good);
        }
    }

    #[test]
    fn node_ids_are_portable() {
        assert!(NodeId::parse("xcloud24_9876").is_ok());
        assert!(NodeId::parse("host-1.example").is_ok());
        for bad in [".hidden", "a b", "a/b", "表", "a:b"] {
            assert!(NodeId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn serde_validates() {
        assert!(serde_json::from_str::<Name>("\"../x\"").is_err());
        assert!(serde_json::from_str::<NodeId>("\"n1\"").is_ok());
    }
}
