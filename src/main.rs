use clap::Parser;

fn main() {
    let cli = compactd::cli::Cli::parse();
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
    std::process::exit(code);
}
