//! The configuration file of `compactd run` (TOML) and `compactd config`.
//!
//! Every `run` flag and every global flag (`root`, `backend_timeout`, …) may
//! be set in the file under its long name (`session_timeout = "30s"`;
//! `-` or `_` alike), repeatable flags as arrays (`command = ["a=…"]`),
//! switches as booleans. Precedence: flag > environment > file > default.
//! The file is `--config FILE` (or `COMPACTD_CONFIG`), else
//! [`DEFAULT_PATH`] when it exists. An unknown key, a table, or a value of
//! the wrong type is an error naming the file and the key.
//!
//! How: the command line is parsed once; every file key whose argument was
//! neither on the command line nor in the environment is added as a flag,
//! and the result parsed again, so that the file's values go through the
//! same parsers (and errors) as flags.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use super::Cli;

/// Read when it exists and no `--config` is given.
pub const DEFAULT_PATH: &str = "/etc/compactd/compactd.toml";

/// The largest configuration file read: 1 MiB (a commented example is 2 KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Subcommands whose flags the file sets (`config` prints what `run` gets).
const RUN_LIKE: &[&str] = &["run", "config"];

/// Where an effective value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    File,
    Default,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Env => "environment",
            Source::File => "file",
            Source::Default => "default",
        }
    }
}

/// The parsed command line with the file applied.
#[derive(Debug)]
pub struct Loaded {
    pub cli: Cli,
    pub file: Option<PathBuf>,
    pub matches: ArgMatches,
    /// Keys the file set (argument ids).
    pub from_file: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Clap(#[from] clap::Error),
    #[error("config file {path}: {why}")]
    File { path: String, why: String },
}

fn norm(s: &str) -> String {
    s.replace('-', "_")
}

/// The settable arguments of a command: key (long name, `_` form) → id.
fn keys_of(cmd: &clap::Command, only_global: bool) -> BTreeMap<String, (String, bool)> {
    cmd.get_arguments()
        .filter(|a| !only_global || a.is_global_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version" | "config"))
        .filter_map(|a| {
            let long = a.get_long()?;
            let switch = matches!(a.get_action(), clap::ArgAction::SetTrue);
            Some((norm(long), (a.get_id().to_string(), switch)))
        })
        .collect()
}

fn flag_args(path: &str, key: &str, long: &str, switch: bool, v: &toml::Value) -> Result<Vec<OsString>, ConfigError> {
    let bad = |why: &str| ConfigError::File { path: path.into(), why: format!("key `{key}`: {why}") };
    let scalar = |v: &toml::Value| -> Result<String, ConfigError> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            _ => Err(bad("expected a string or a number")),
        }
    };
    if switch {
        return match v {
            toml::Value::Boolean(true) => Ok(vec![format!("--{long}").into()]),
            toml::Value::Boolean(false) => Ok(vec![]),
            _ => Err(bad("expected true or false")),
        };
    }
    match v {
        toml::Value::Array(items) => {
            items.iter().map(|i| Ok(format!("--{long}={}", scalar(i)?).into())).collect::<Result<Vec<_>, _>>()
        }
        other => Ok(vec![format!("--{long}={}", scalar(other)?).into()]),
    }
}

fn source_of(m: &ArgMatches, id: &str) -> Option<ValueSource> {
    m.try_contains_id(id).ok().and_then(|_| m.value_source(id))
}

/// Parses `argv` (program name first) and applies the configuration file.
pub fn load(argv: Vec<OsString>) -> Result<Loaded, ConfigError> {
    let cmd = Cli::command();
    let first = cmd.clone().try_get_matches_from(&argv)?;
    let explicit = first.get_one::<PathBuf>("config").cloned();
    let path = match explicit {
        Some(p) => Some(p),
        None => Some(PathBuf::from(DEFAULT_PATH)).filter(|p| p.exists()),
    };
    let Some(path) = path else {
        let cli = with_defaults_marked(Cli::from_arg_matches(&first)?, &first);
        return Ok(Loaded { cli, file: None, matches: first, from_file: vec![] });
    };
    let shown = path.display().to_string();
    let bytes = super::read_bounded(&path, MAX_CONFIG_BYTES, "a configuration file")
        .map_err(|why| ConfigError::File { path: shown.clone(), why })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::File { path: shown.clone(), why: "not UTF-8 text".into() })?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| ConfigError::File { path: shown.clone(), why: e.to_string() })?;
    let globals = keys_of(&cmd, true);
    let run_cmd = cmd.find_subcommand("run").expect("run exists");
    let run = keys_of(run_cmd, false);
    let sub = first.subcommand().filter(|(name, _)| RUN_LIKE.contains(name)).map(|(_, m)| m);
    let mut extra: Vec<OsString> = vec![];
    let mut from_file = vec![];
    // `--long` → the file's key, to blame a bad value on the file.
    let mut file_keys: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in &table {
        let k = norm(key);
        let (matches, (id, switch)) = if let Some(g) = globals.get(&k) {
            (Some(&first), g.clone())
        } else if let Some(r) = run.get(&k) {
            (sub, r.clone())
        } else {
            let mut known: Vec<&str> = globals.keys().chain(run.keys()).map(|s| s.as_str()).collect();
            known.sort();
            return Err(ConfigError::File {
                path: shown,
                why: format!("unknown key `{key}` (known keys: {})", known.join(", ")),
            });
        };
        let Some(m) = matches else { continue };
        let args = flag_args(&shown, key, &k.replace('_', "-"), switch, value)?;
        match source_of(m, &id) {
            Some(ValueSource::CommandLine) | Some(ValueSource::EnvVariable) => {}
            _ => {
                extra.extend(args);
                from_file.push(id);
                file_keys.insert(format!("--{}", k.replace('_', "-")), key.clone());
            }
        }
    }
    let mut all = argv;
    all.extend(extra);
    let matches = cmd.try_get_matches_from(&all).map_err(|e| blame_file(e, &shown, &file_keys))?;
    let cli = with_defaults_marked(Cli::from_arg_matches(&matches)?, &matches);
    Ok(Loaded { cli, file: Some(path), matches, from_file })
}

/// Notes which settings nobody chose (not a flag, the environment or the
/// file), where the command treats a default differently from a choice.
fn with_defaults_marked(mut cli: Cli, m: &ArgMatches) -> Cli {
    if let super::Command::Run(args) = &mut cli.command {
        let run = m.subcommand_matches("run");
        args.listen_defaulted = run.and_then(|r| source_of(r, "listen")) == Some(ValueSource::DefaultValue);
    }
    cli
}

/// A parse error about a value the file gave: named by the file and its
/// key, not by the flag the file's value was turned into.
fn blame_file(e: clap::Error, path: &str, file_keys: &BTreeMap<String, String>) -> ConfigError {
    use clap::error::{ContextKind, ContextValue};
    let flag = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.split([' ', '=']).next().unwrap_or_default().to_string(),
        _ => return ConfigError::Clap(e),
    };
    let Some(key) = file_keys.get(&flag) else { return ConfigError::Clap(e) };
    let value = match e.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(v)) => format!(" {v:?}"),
        _ => String::new(),
    };
    let why = match std::error::Error::source(&e) {
        Some(source) => source.to_string(),
        None => e.kind().to_string(),
    };
    ConfigError::File { path: path.into(), why: format!("key `{key}`: invalid value{value}: {why}") }
}

/// Hides credentials a URI might carry (user info, secret-looking query
/// parameters); compactd refuses such URIs, but `config` prints what it got.
pub fn redact(value: &str) -> String {
    let mut v = value.to_string();
    if let Some(scheme_end) = v.find("://") {
        let rest = &v[scheme_end + 3..];
        let host_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..host_end].rfind('@') {
            v = format!("{}://***@{}", &v[..scheme_end], &rest[at + 1..]);
        }
    }
    if let Some(q) = v.find('?') {
        let (base, query) = v.split_at(q + 1);
        let parts: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _))
                    if ["secret", "password", "token", "key", "credential", "signature"]
                        .iter()
                        .any(|s| k.to_ascii_lowercase().contains(s)) =>
                {
                    format!("{k}=***")
                }
                _ => p.to_string(),
            })
            .collect();
        v = format!("{base}{}", parts.join("&"));
    }
    v
}

fn toml_value(raw: &str) -> String {
    if raw.parse::<i64>().is_ok() || raw == "true" || raw == "false" {
        raw.to_string()
    } else {
        toml::Value::String(raw.to_string()).to_string()
    }
}

/// `compactd config`: the effective configuration of `run`, as a loadable
/// TOML file with each value's source; secrets redacted.
pub fn print(loaded: &Loaded) -> String {
    let cmd = Cli::command();
    let mut out = String::new();
    out.push_str("# The effective configuration of `compactd run` (flag > environment > file > default).\n");
    match &loaded.file {
        Some(p) => out.push_str(&format!("# Config file: {}\n", p.display())),
        None => out.push_str(&format!("# Config file: none ({DEFAULT_PATH} does not exist; --config FILE)\n")),
    }
    let sub = loaded.matches.subcommand().map(|(_, m)| m);
    let mut rows: Vec<(String, String, Source)> = vec![];
    let mut add = |m: &ArgMatches, keys: BTreeMap<String, (String, bool)>| {
        for (key, (id, switch)) in keys {
            let source = match source_of(m, &id) {
                _ if loaded.from_file.contains(&id) => Source::File,
                Some(ValueSource::CommandLine) => Source::Flag,
                Some(ValueSource::EnvVariable) => Source::Env,
                _ => Source::Default,
            };
            let raw: Vec<String> = m
                .try_get_raw(&id)
                .ok()
                .flatten()
                .map(|vals| vals.map(|v| redact(&v.to_string_lossy())).collect())
                .unwrap_or_default();
            let value = if switch {
                m.get_flag(&id).to_string()
            } else if id == "commands" {
                format!(
                    "[{}]",
                    raw.iter().map(|r| toml::Value::String(r.clone()).to_string()).collect::<Vec<_>>().join(", ")
                )
            } else if let Some(r) = raw.first() {
                toml_value(r)
            } else {
                rows.push((format!("# {key}"), "(unset)".into(), source));
                continue;
            };
            rows.push((key, value, source));
        }
    };
    add(&loaded.matches, keys_of(&cmd, true));
    if let Some(m) = sub {
        add(m, keys_of(cmd.find_subcommand("run").expect("run exists"), false));
    }
    let width = rows.iter().map(|(k, v, _)| k.len() + v.len() + 3).max().unwrap_or(0);
    for (k, v, s) in rows {
        let line = format!("{k} = {v}");
        out.push_str(&format!("{line:<width$}  # {}\n", s.as_str()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_lose_their_secrets() {
        assert_eq!(
            redact("s3://u:p@bucket/x?endpoint=http://h&secret_access_key=abc"),
            "s3://***@bucket/x?endpoint=http://h&secret_access_key=***"
        );
        assert_eq!(redact("fs:///var/lib/compactd"), "fs:///var/lib/compactd");
    }
}
