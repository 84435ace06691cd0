//! `profdev agent [-F HZ] [--interval SECS] [--otlp URL [--otlp-protocol grpc|http]] [--pyroscope URL] [--parca URL] [--label KEY=VALUE]...`:
//! profile the whole machine continuously and send one profile per
//! interval to the backend a fleet already runs.
//!
//! # Synopsis
//!
//! ```text
//! profdev agent [-v] [-F HZ] [--interval SECS] [--label KEY=VALUE]... [--insecure]
//!               [--otlp URL [--otlp-protocol grpc|http]] [--pyroscope URL] [--parca URL]
//! ```
//!
//! # Description
//!
//! Samples every CPU at `-F` Hz (default 19, as Parca's agent; software
//! cpu-clock), kernel and user stacks (the kernel's callchain, the user
//! stack unwound as `profdev record -g` unwinds it), and every
//! `--interval` seconds (default 15) cuts one profile: the recorder of
//! `profdev record`, its functions and lines named locally from each
//! object's ELF and DWARF by a thread of their own, every mapping's build
//! id kept so that a backend can symbolize again.
//!
//! Every profile carries `host.name` and each `--label KEY=VALUE`
//! (`service_name` is Pyroscope's key); each process its pid, command,
//! executable path and build id, and its cgroup path with what it reveals:
//! the container id (docker, containerd, CRI-O, podman), the systemd unit,
//! the Kubernetes pod uid, from cgroup v2 and v1 lines alike. A process is
//! read when it forks or execs, so one that lives between two cuts is
//! named too.
//!
//! `--otlp URL` sends each profile to an OpenTelemetry collector as an
//! `ExportProfilesServiceRequest` of opentelemetry-proto v1.10.0 (the
//! profiles signal is alpha, `v1development`; a collector built for
//! another release may refuse it): over gRPC
//! (`ProfilesService/Export`, default port 4317) or with
//! `--otlp-protocol http` as `POST /v1development/profiles`
//! (`application/x-protobuf`, default port 4318; a path in URL replaces
//! it). Resource attributes follow OpenTelemetry's conventions
//! (`process.executable.path`, `process.executable.build_id.gnu`,
//! `process.linux.cgroup`, `container.id`, `k8s.pod.uid`), plus
//! `profdev.systemd.unit`.
//!
//! `--pyroscope URL` pushes each profile to Grafana Pyroscope (default
//! port 4040) through its push API over the connect protocol (`POST
//! /push.v1.PusherService/Push`, `application/proto`): one series labelled
//! `__name__=process_cpu`, `service_name` (the `--label`, else
//! `profdev-agent`), `host_name` and the other `--label`s, holding a
//! gzipped pprof whose time span is the interval and whose samples carry
//! their process's labels (`pid`, `comm`, and the attributes above with
//! `.` written `_`, as Pyroscope's label names require); Pyroscope makes
//! each process a series of its own.
//!
//! `--parca URL` writes each profile to a Parca server (default port
//! 7070) with `WriteRaw` of its profile store
//! (`parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw`, gRPC): the
//! same series labels and labelled pprof as Pyroscope's, `normalized` set
//! (the addresses are the objects' own). Any of the three destinations may
//! be given together.
//!
//! Sending runs apart from sampling, one thread per destination: a
//! destination that is down or slow gets exponential backoff with jitter
//! (from a tenth of the interval, doubling to eight intervals, at most
//! five minutes), while profiles wait in a spool in memory (64 MB of
//! recordings; past it the oldest are dropped and counted) and go out in
//! order when it returns. With `--spool DIR` they wait on disk too (the
//! same cap, the same oldest dropped): a
//! directory per destination under DIR (0700), a file per profile (0600,
//! written whole through profdev's safe-write path, removed once sent or
//! dropped); the next start sends what it holds first, oldest first.
//! `--token-file F` gives the bearer token every request carries
//! (`Authorization: Bearer …`, over gRPC the `authorization` metadata):
//! read from a file, never taken on the command line, never printed.
//! Plain http goes only to this machine (localhost,
//! a loopback address) unless `--insecure` is given, and a token never
//! goes over plain http to another machine.
//! `deploy/` runs it as a non-root user with only the capabilities it needs
//! (a systemd unit, a Kubernetes DaemonSet; `deploy/README.md` says why).
//!
//! SIGINT, SIGTERM or SIGHUP end the agent: the last interval is cut, and the
//! spool is sent for up to ten seconds (what is left stays in `--spool DIR`).
//! The last line says how many profiles were cut and, per destination, sent,
//! failed, dropped and left undelivered. With `-v` a line per interval on
//! standard error: samples, lost, and per destination profiles sent, failures
//! with the last error, spool size and dropped profiles.
//!
//! # Example
//!
//! ```text
//! profdev agent -v --interval 15 --otlp http://127.0.0.1:4317 --label service_name=web
//! ```
//!
//! # Bugs
//!
//! Not built yet (issue 26), and refused with a sentence: Pyroscope's
//! `/ingest` API, `--tls-ca`, https, basic auth; without a
//! destination there is no local store yet. The cgroup of a process is
//! read from `/proc` at its fork, exec or first sample: one that moves to
//! another cgroup keeps the first. A collector's partial-success answer is
//! not read. Samples are put in the interval whose cut the merge of the
//! CPUs' rings has released them to (up to about 10 ms late).

use anyhow::{anyhow, bail, Result};
use clap::{Parser, ValueEnum};
use profdev_agent::otlp::Protocol;
use profdev_agent::{Options, OtlpOptions};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

const NAME: &str = "profdev agent";

/// OTLP's transports.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum OtlpProtocol {
    Grpc,
    Http,
}

/// Profile the whole machine continuously; send a profile per interval to OTLP, Pyroscope or Parca.
#[derive(Parser, Debug)]
#[command(
    name = "profdev agent",
    version,
    after_help = "Runs until SIGINT, SIGTERM or SIGHUP, then sends what it holds for up to ten seconds. \
        Plain http goes only to this machine unless --insecure is given."
)]
pub(crate) struct Args {
    /// Samples per second per CPU (software cpu-clock), at most 10000.
    #[arg(short = 'F', value_name = "HZ", default_value_t = 19)]
    frequency: u32,
    /// Seconds between profiles.
    #[arg(long, value_name = "SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    interval: u64,
    /// An OpenTelemetry collector (http://HOST[:PORT][/PATH]).
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,
    /// OTLP over gRPC (port 4317) or HTTP (port 4318).
    #[arg(long, value_name = "PROTOCOL", default_value = "grpc")]
    otlp_protocol: OtlpProtocol,
    /// A Grafana Pyroscope server (http://HOST[:PORT][/PATH]): pprof through its push API.
    #[arg(long, value_name = "URL")]
    pyroscope: Option<String>,
    /// A Parca server (http://HOST[:PORT]): pprof through WriteRaw (gRPC).
    #[arg(long, value_name = "URL")]
    parca: Option<String>,
    /// A label on every profile, KEY=VALUE (repeatable; service_name is Pyroscope's key).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// A directory where profiles wait on disk too, sent by the next start if this one could not.
    #[arg(long, value_name = "DIR")]
    spool: Option<PathBuf>,
    /// A file holding the bearer token every request carries (never give it on the command line).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// A CA certificate file for TLS (not built yet).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Accept sending over plain http to another machine.
    #[arg(long)]
    insecure: bool,
    /// A line per interval on standard error: samples, lost, each destination's counts.
    #[arg(short = 'v')]
    verbose: bool,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("--label takes KEY=VALUE, not {s:?}")),
    }
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>(NAME, args) {
        Ok(args) => crate::cmdline::finish(NAME, run(&args)),
        Err(code) => code,
    }
}

fn options(args: &Args) -> Result<Options> {
    if args.tls_ca.is_some() {
        bail!("--tls-ca is not built yet (issue 26); this build sends to OpenTelemetry (--otlp URL), Pyroscope (--pyroscope URL) or Parca (--parca URL)");
    }
    Ok(Options {
        frequency: args.frequency,
        interval: Duration::from_secs(args.interval),
        labels: args.labels.clone(),
        otlp: args.otlp.clone().map(|url| OtlpOptions {
            url,
            protocol: match args.otlp_protocol {
                OtlpProtocol::Grpc => Protocol::Grpc,
                OtlpProtocol::Http => Protocol::Http,
            },
        }),
        pyroscope: args.pyroscope.clone(),
        parca: args.parca.clone(),
        spool: args.spool.clone(),
        token: match &args.token_file {
            Some(f) => Some(profdev_agent::token::Token::read(f).map_err(|e| anyhow!(e))?),
            None => None,
        },
        insecure: args.insecure,
        verbose: args.verbose,
        ..Options::default()
    })
}

fn run(args: &Args) -> Result<ExitCode> {
    let opts = options(args)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| anyhow!("cannot catch signal {sig}: {e}"))?;
    }
    let objects = profdev_symbolize::Objects::new();
    let out = profdev_agent::run(&opts, objects, &stop, &mut |line| {
        eprintln!("{NAME}: {line}")
    })?;
    for line in out.summary() {
        eprintln!("{NAME}: {line}");
    }
    if let Some(e) = &out.stopped {
        bail!("sampling stopped: {e}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let argv = std::iter::once("profdev agent").chain(extra.iter().copied());
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn options_not_built_yet_are_refused_by_name() {
        let e = options(&args(&["--tls-ca", "/etc/profdev/ca.pem"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--tls-ca is not built yet (issue 26); this build sends to OpenTelemetry (--otlp URL), Pyroscope (--pyroscope URL) or Parca (--parca URL)"
        );
        let e = options(&args(&[
            "--otlp",
            "http://x",
            "--token-file",
            "/nonexistent/t",
        ]));
        let e = e.unwrap_err().to_string();
        assert!(
            e.starts_with("--token-file /nonexistent/t: cannot read it"),
            "{e}"
        );
    }

    #[test]
    fn defaults_and_labels() {
        let o = options(&args(&[
            "--otlp",
            "http://127.0.0.1",
            "--label",
            "service_name=web",
            "--label",
            "k=a=b",
        ]))
        .unwrap();
        assert_eq!((o.frequency, o.interval), (19, Duration::from_secs(15)));
        assert_eq!(
            o.labels,
            vec![
                ("service_name".into(), "web".into()),
                ("k".into(), "a=b".into())
            ]
        );
        assert_eq!(o.otlp.unwrap().protocol, Protocol::Grpc);
        assert!(Args::try_parse_from(["profdev agent", "--label", "=v"]).is_err());
        assert!(Args::try_parse_from(["profdev agent", "--interval", "0"]).is_err());
    }
}
