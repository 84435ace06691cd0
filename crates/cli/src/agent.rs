//! `profdev agent [-F HZ] [--interval SECS] [--otlp URL [--otlp-protocol grpc|http]] [--pyroscope URL [--pyroscope-api push|ingest]] [--parca URL] [--label KEY=VALUE]...`:
//! profile the whole machine continuously and send one profile per
//! interval to the backend a fleet already runs.
//!
//! # Synopsis
//!
//! ```text
//! profdev agent [-v] [-F HZ] [--interval SECS] [--label KEY=VALUE]... [--insecure]
//!               [--otlp URL [--otlp-protocol grpc|http]] [--pyroscope URL [--pyroscope-api push|ingest]]
//!               [--parca URL] [--token-file F | --basic-auth-file F] [--tls-ca F] [--spool DIR]
//!               [--state-dir DIR] [--store DIR] [--store-max-bytes BYTES] [--store-max-age DURATION]
//!               [--heap PID]... [--heap-comm NAME]... [--heap-sample-bytes N]
//! ```
//!
//! # Description
//!
//! Samples every CPU at `-F` Hz (default 19, as Parca's agent; software
//! cpu-clock), kernel and user stacks (the kernel's callchain, the user
//! stack unwound as `profdev record -g` unwinds it), and every
//! `--interval` seconds (default 15) cuts one profile: the recorder of
//! `profdev record`, its functions named locally from each object's
//! symbol tables by a thread of their own (with `--lines`, source lines
//! too, from DWARF: a large object's costs a hundred MB while it is
//! parsed), every mapping's build id kept so that a backend can symbolize
//! again.
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
//! it), gzipped either way; a partial success the collector answers
//! (profiles rejected) is the destination's last error. Resource attributes follow OpenTelemetry's conventions
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
//! each process a series of its own. `--pyroscope-api ingest` sends the
//! same pprof to the older `POST /ingest?format=pprof` instead (multipart,
//! the series labels in `name=SERVICE{key=value,…}`, `from`/`until` the
//! interval in Unix seconds).
//!
//! `--parca URL` writes each profile to a Parca server (default port
//! 7070) with `WriteRaw` of its profile store
//! (`parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw`, gRPC): the
//! same series labels and labelled pprof as Pyroscope's, `normalized` set
//! (the addresses are the objects' own). Any of the three destinations may
//! be given together.
//!
//! `--heap PID` (repeatable) profiles PID's heap too: mprof's library is
//! attached as `mprof -p PID --sample-bytes N` attaches it (whole stacks,
//! sampled every N = `--heap-sample-bytes` bytes on average, default
//! 524288; 0 counts all), asked for a report at each cut. Per allocation
//! stack: bytes and blocks allocated in the interval (`alloc_space`,
//! `alloc_objects`; unbiased estimates, standard error at most √(N·B) for
//! B bytes) and in use at its end (`inuse_space`, `inuse_objects`).
//! `--heap-comm NAME` (repeatable) attaches the processes whose
//! `/proc/PID/comm` is NAME when first seen (at the start, at each cut),
//! but non-dumpable ones. Each attach, or why not, is a line on standard
//! error (`heap: attached to process PID (COMM), …`). Refused: the agent,
//! any profdev, and what `mprof -p` refuses (static, counted or detached
//! before, traced); root attaches any other process it names, as `mprof
//! -p` run by root does. Pyroscope gets a series `__name__=memory`
//! (labels `pid`, `comm`) in the push request, or with `ingest` a request
//! of its own (Go's heap `sample_type_config`, none cumulative); Parca a
//! series `__name__=memory`; OTLP a request of its own after the CPU one
//! (four `Profile`s per process, one per sample type). A process that
//! exits is dropped; when the agent ends each gives a last report and is
//! detached (its GOT given back): it runs on uncounted.
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
//! dropped; heap profiles with their interval); the next start sends what
//! it holds first, oldest first.
//! `--token-file F` gives the bearer token every request carries
//! (`Authorization: Bearer …`, over gRPC the `authorization` metadata),
//! `--basic-auth-file F` a `USER:PASSWORD` line for HTTP basic auth
//! instead: read from a file, never taken on the command line, never
//! printed. `https://` URLs are checked against the system's root
//! certificates, or with `--tls-ca F` against the CA certificates of that
//! PEM file only. Plain http goes only to this machine (localhost, a
//! loopback address) unless `--insecure` is given, and a credential never
//! goes over plain http to another machine.
//! `deploy/` runs it as a non-root user with only the capabilities it needs
//! (a systemd unit, a Kubernetes DaemonSet; `deploy/README.md` says why).
//!
//! With no destination (or with `--store DIR`) each interval's recording
//! (a `profdev.data`) is kept in a local store, `STATE/store`: one 0600
//! file per interval named by its UTC times (and each `--heap` profile a
//! gzipped pprof, `START_END.heap-PID-COMM.pb.gz`, that `go tool pprof
//! -sample_index=alloc_space` opens), pruned after each write by
//! age (`--store-max-age`, default 24h) then size (`--store-max-bytes`,
//! default 256 MiB), oldest first, the newest kept; `profdev report
//! --since 10m` and `profdev export FORMAT --since 2h` read it.
//!
//! Every interval the agent writes `health` in its state directory
//! (`--state-dir DIR`, default /var/lib/profdev-agent, made 0700), in the
//! devices' stat format: samples, lost, heap profiles, and per destination sent,
//! failures, last error, spool, dropped, undelivered; 0644, as it holds
//! no token and no kernel address. `profdev stat --agent` prints it.
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
//! profdev agent --pyroscope http://127.0.0.1:4040 --heap "$(pidof web)"  # its heap too
//! profdev agent &  profdev report --since 10m  # the local store, no backend
//! ```
//!
//! # Bugs
//!
//! The store's recordings carry no process labels (the cgroup-derived
//! ones go only to destinations). No client certificate (mutual TLS) is
//! offered. The cgroup of a process is
//! read from `/proc` at its fork, exec or first sample: one that moves to
//! another cgroup keeps the first. Samples are put in the interval whose cut the merge of the
//! CPUs' rings has released them to (up to about 10 ms late).
//!
//! Reports of `--heap` processes are asked for and symbolized on the sampling
//! thread (up to 5 s for a process that does not answer), the ELF files
//! read at each cut by their paths in the agent's mount namespace. The
//! process must see the agent's temporary directory and the agent needs
//! root: no container in another mount namespace, nor `deploy/`'s units.
//! A process once detached is not attached again.

use anyhow::{anyhow, bail, Result};
use clap::{Parser, ValueEnum};
use profdev_agent::otlp::Protocol;
use profdev_agent::pyroscope::Api;
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

/// Pyroscope's APIs.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum PyroscopeApi {
    Push,
    Ingest,
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
    /// Pyroscope's push API (connect protocol) or its older /ingest.
    #[arg(long, value_name = "API", default_value = "push")]
    pyroscope_api: PyroscopeApi,
    /// A Parca server (http://HOST[:PORT]): pprof through WriteRaw (gRPC).
    #[arg(long, value_name = "URL")]
    parca: Option<String>,
    /// A label on every profile, KEY=VALUE (repeatable; service_name is Pyroscope's key).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// A directory where profiles wait on disk too, sent by the next start if this one could not.
    #[arg(long, value_name = "DIR")]
    spool: Option<PathBuf>,
    /// The agent's state: its health file, and the local store without a destination.
    #[arg(long, value_name = "DIR", default_value = profdev_agent::health::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// Keep each profile in this local store (default without a destination: STATE/store).
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
    /// The store's size bound in bytes; the oldest profiles go first.
    #[arg(long, value_name = "BYTES", default_value_t = profdev_agent::store::DEFAULT_MAX_BYTES)]
    store_max_bytes: u64,
    /// The store's age bound (e.g. 24h, 7d).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = profdev_agent::store::parse_duration)]
    store_max_age: Duration,
    /// A file holding the bearer token every request carries (never give it on the command line).
    #[arg(long, value_name = "FILE", conflicts_with = "basic_auth_file")]
    token_file: Option<PathBuf>,
    /// A file holding USER:PASSWORD for HTTP basic auth (never give it on the command line).
    #[arg(long, value_name = "FILE")]
    basic_auth_file: Option<PathBuf>,
    /// The CA certificates (PEM) https servers are checked against, instead of the system's.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Accept sending over plain http to another machine.
    #[arg(long)]
    insecure: bool,
    /// A line per interval on standard error: samples, lost, each destination's counts.
    #[arg(short = 'v')]
    verbose: bool,
    /// Name source lines too (reads each object's DWARF: more memory and time).
    #[arg(long)]
    lines: bool,
    /// Attach mprof to process PID and send its heap profile each interval too (repeatable).
    #[arg(long = "heap", value_name = "PID")]
    heap: Vec<u32>,
    /// Attach mprof to every process running command NAME (its comm), when seen (repeatable).
    #[arg(long = "heap-comm", value_name = "NAME")]
    heap_comm: Vec<String>,
    /// The heap profiles' sampling: an allocation per N bytes on average (0: every one, exact).
    #[arg(long, value_name = "N", default_value_t = profdev_agent::heap::DEFAULT_SAMPLE_BYTES)]
    heap_sample_bytes: u64,
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
    let token = match (&args.token_file, &args.basic_auth_file) {
        (Some(f), _) => Some(profdev_agent::token::Token::read(f)),
        (None, Some(f)) => Some(profdev_agent::token::Token::read_basic(f)),
        (None, None) => None,
    };
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
        pyroscope_api: match args.pyroscope_api {
            PyroscopeApi::Push => Api::Push,
            PyroscopeApi::Ingest => Api::Ingest,
        },
        parca: args.parca.clone(),
        spool: args.spool.clone(),
        token: token.transpose().map_err(|e| anyhow!(e))?,
        tls_ca: args.tls_ca.clone(),
        state_dir: Some(args.state_dir.clone()),
        store: args.store.clone(),
        store_max_bytes: args.store_max_bytes,
        store_max_age: args.store_max_age,
        insecure: args.insecure,
        verbose: args.verbose,
        lines: args.lines,
        heap: profdev_agent::heap::HeapOptions {
            pids: args.heap.clone(),
            comms: args.heap_comm.clone(),
            sample_bytes: args.heap_sample_bytes,
            seed: None,
        },
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
    // Freed memory goes back to the kernel, each interval: names and
    // stacks are made and freed all the time.
    crate::malloc::bound_for_server();
    let trim = (stop.clone(), opts.interval);
    std::thread::spawn(move || {
        while !trim.0.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(trim.1);
            crate::malloc::release_free();
        }
    });
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
    fn credential_files_are_read_and_exclusive() {
        assert!(Args::try_parse_from([
            "profdev agent",
            "--token-file",
            "a",
            "--basic-auth-file",
            "b"
        ])
        .is_err());
        let e = options(&args(&[
            "--otlp",
            "http://x",
            "--basic-auth-file",
            "/nonexistent/b",
        ]));
        assert!(e
            .unwrap_err()
            .to_string()
            .starts_with("--basic-auth-file /nonexistent/b: cannot read it"));
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
