//! Log set-up: human-readable lines on stderr, filtered by `RUST_LOG`
//! (default `info`). Stdout is reserved for command output (`--json`).
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

pub fn init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
