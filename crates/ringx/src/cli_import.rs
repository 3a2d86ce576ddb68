//! `ringx import [-o ringx.toml] [--strict] [--prefix DIR] NGINX_CONF`: an nginx configuration
//! translated to ringx's (crates/import), its report on standard error, and the result
//! checked as `ringx check` checks it.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ImportArgs {
    /// nginx.conf (the files it includes are read too, relative to its directory).
    pub nginx_conf: PathBuf,
    /// Write the ringx configuration here (default: standard output).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Fail (exit 1, nothing written) if any directive is not translated exactly.
    #[arg(long)]
    pub strict: bool,
    /// nginx's prefix (-p) for relative root, log and pid paths.
    #[arg(long, default_value = "/usr/share/nginx")]
    pub prefix: PathBuf,
}

pub fn run(args: ImportArgs) -> ExitCode {
    let opts = ringx_import::Options {
        prefix: args.prefix.clone(),
    };
    let out = match ringx_import::import(&args.nginx_conf, opts) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ringx: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprint!("{}", out.report.render());
    if args.strict && out.report.has_loss() {
        eprintln!(
            "ringx: --strict: not every directive was translated exactly (see above); nothing written"
        );
        return ExitCode::FAILURE;
    }
    let name = args
        .output
        .as_ref()
        .map_or("(imported)".to_string(), |p| p.display().to_string());
    // What `ringx check` says about the result, so that a translation that needs a hand
    // (a root that does not exist here, a certificate to copy) says so at once.
    let checked = ringx_config::parse(&name, &out.toml)
        .map_err(ringx_server::error::Error::from)
        .and_then(|c| ringx_server::compiled::Compiled::from(&c).map(|_| ()));
    match &args.output {
        Some(p) => {
            if let Err(e) = std::fs::write(p, &out.toml) {
                eprintln!("ringx: cannot write {}: {e}", p.display());
                return ExitCode::FAILURE;
            }
        }
        None => print!("{}", out.toml),
    }
    match checked {
        Ok(()) => {
            eprintln!("ringx: the imported configuration passes `ringx check`");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "ringx: the imported configuration does not pass `ringx check` on this machine: \
                 {e}\nringx: fix that in the output (or in the nginx configuration) and check again"
            );
            ExitCode::FAILURE
        }
    }
}
