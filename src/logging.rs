//! Log set-up: human-readable lines (or JSON, `--log-format json`) on
//! stderr, filtered by `RUST_LOG` (default `info`). Stdout is reserved for command output (`--json`).
//!
//! The credential-signing crates are capped at `info` whatever `RUST_LOG`
//! says: at `debug` they print the credentials they try, in clear.

/// Targets that must never log below `info` (they print secrets).
const SECRET_TARGETS: &[&str] = &[
    "reqsign",
    "reqsign_core",
    "reqsign_aws_v4",
    "reqsign_file_read_tokio",
    "reqsign_http_send_reqwest",
    "reqwest",
    "hyper",
];

pub fn filter() -> tracing_subscriber::EnvFilter {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    for target in SECRET_TARGETS {
        filter = filter.add_directive(format!("{target}=info").parse().expect("static directive"));
    }
    filter
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields.message`,
    /// the event's fields, and its spans), for log shippers.
    Json,
}

pub fn init(format: LogFormat) {
    let builder = tracing_subscriber::fmt().with_env_filter(filter()).with_writer(std::io::stderr).with_target(false);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}
