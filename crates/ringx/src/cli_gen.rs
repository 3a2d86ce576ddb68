//! `ringx gen man|bash|zsh|fish`: the man page `ringx(8)` and the shell completions, made
//! from the CLI definition itself (clap_mangen, clap_complete), so they cannot drift from
//! what the binary accepts. `make deb` puts them in the package.

use std::io::Write;
use std::process::ExitCode;

/// What to generate.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum What {
    /// The man page ringx(8) (roff), with a page section per subcommand.
    Man,
    Bash,
    Zsh,
    Fish,
}

#[derive(clap::Args)]
pub struct GenArgs {
    #[arg(value_enum)]
    what: What,
}

/// Writes what was asked for to standard output.
pub fn run(args: GenArgs, mut cmd: clap::Command) -> ExitCode {
    let mut out = Vec::new();
    let r = match args.what {
        What::Man => man(cmd, &mut out),
        What::Bash | What::Zsh | What::Fish => {
            let shell = match args.what {
                What::Bash => clap_complete::Shell::Bash,
                What::Zsh => clap_complete::Shell::Zsh,
                _ => clap_complete::Shell::Fish,
            };
            clap_complete::generate(shell, &mut cmd, "ringx", &mut out);
            Ok(())
        }
    };
    if let Err(e) = r.and_then(|()| std::io::stdout().write_all(&out)) {
        eprintln!("ringx gen: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// ringx(8): the top page, then each subcommand's synopsis and options as a section.
fn man(cmd: clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    let cmd = cmd.version(env!("CARGO_PKG_VERSION")).long_about(
        "ringx serves HTTP/1.1, HTTP/2 and TLS, proxies HTTP, gRPC, TCP and UDP to \
         upstream servers, and runs one pinned zone (thread, io_uring, connection table) \
         per CPU core. Its configuration is /etc/ringx/ringx.toml when installed from the \
         package; `ringx check` validates it and `ringx default-config` prints a starting \
         point.",
    );
    let m = clap_mangen::Man::new(cmd.clone()).section("8");
    m.render_title(out)?;
    m.render_name_section(out)?;
    m.render_synopsis_section(out)?;
    m.render_description_section(out)?;
    m.render_options_section(out)?;
    m.render_subcommands_section(out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        writeln!(out, ".SH \"RINGX {}\"", name.to_uppercase())?;
        let sub = sub.clone().bin_name(format!("ringx {name}"));
        let sm = clap_mangen::Man::new(sub);
        let mut part = Vec::new();
        sm.render_synopsis_section(&mut part)?;
        sm.render_description_section(&mut part)?;
        sm.render_options_section(&mut part)?;
        // The page's own sections become paragraphs under this subcommand's heading.
        let text = String::from_utf8_lossy(&part).replace(".SH ", ".SS ");
        out.extend_from_slice(text.as_bytes());
    }
    writeln!(
        out,
        ".SH SIGNALS\nSIGTERM, SIGINT: stop accepting and drain (drain_timeout). SIGQUIT: exit \
         at once. SIGHUP: reload the configuration (a failed reload changes nothing). SIGUSR1: \
         reopen the access and error logs. SIGUSR2: binary upgrade on the same sockets.\n\
         .SH FILES\n/etc/ringx/ringx.toml, /var/log/ringx/, /run/ringx/ringx.pid, \
         /lib/systemd/system/ringx.service\n.SH SEE ALSO\nnginx(8), systemd.service(5)"
    )?;
    m.render_version_section(out)?;
    Ok(())
}
