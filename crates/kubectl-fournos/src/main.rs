use std::process::ExitCode;

use clap::Parser as _;
use kubectl_fournos::cli::Cli;
use kubectl_fournos::error::Failure;
use kubectl_fournos::print;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match kubectl_fournos::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The error may quote the apiserver, and so the cluster's objects.
            eprintln!("{}", print::lines(&format!("error: {error:#}")));
            ExitCode::from(
                error
                    .downcast_ref::<Failure>()
                    .map_or(1, Failure::exit_code),
            )
        }
    }
}
