use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = compactd::cli::Cli::parse();
    // One-shot commands print to stdout and may be piped into `head`: die
    // quietly on a closed pipe like other Unix tools instead of panicking in
    // `println!`. The daemon keeps SIGPIPE ignored (its sockets and child
    // pipes report EPIPE as an error instead).
    if !matches!(cli.command, compactd::cli::Command::Run(_)) {
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    compactd::logging::init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let code = match rt.block_on(compactd::cli::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("compactd: error: {e:#}");
            1
        }
    };
    drop(rt);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
