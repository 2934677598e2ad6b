use std::process::ExitCode;

use clap::Parser as _;
use kubectl_fournos::cli::Cli;
use kubectl_fournos::error::Failure;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match kubectl_fournos::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(
                error
                    .downcast_ref::<Failure>()
                    .map_or(1, Failure::exit_code),
            )
        }
    }
}
