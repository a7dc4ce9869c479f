use std::process::ExitCode;

fn main() -> ExitCode {
    let loaded = match compactd::cli::config::load(std::env::args_os().collect()) {
        Ok(l) => l,
        Err(compactd::cli::config::ConfigError::Clap(e)) => e.exit(),
        Err(e) => {
            compactd::logging::eprint_line(&format!("compactd: error: {}", layouts::name::shown(&e.to_string())));
            return ExitCode::from(2);
        }
    };
    // One-shot commands print to stdout and may be piped into `head`: die
    // quietly on a closed pipe like other Unix tools instead of panicking in
    // `println!`. The daemon keeps SIGPIPE ignored (its sockets and child
    // pipes report EPIPE as an error instead).
    if !matches!(loaded.cli.command, compactd::cli::Command::Run(_)) {
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if let Some(code) = compactd::cli::offline(&loaded) {
        return ExitCode::from(code as u8);
    }
    let cli = loaded.cli;
    compactd::logging::init(cli.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let code = match rt.block_on(compactd::cli::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            compactd::logging::eprint_line(&format!("compactd: error: {}", compactd::cli::error_line(&e)));
            1
        }
    };
    drop(rt);
    // Queued log lines are written by a thread of their own (a broken
    // stderr must not stop the daemon): give it a bounded moment.
    compactd::logging::flush();
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
