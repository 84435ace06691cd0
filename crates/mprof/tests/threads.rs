//! Threads allocating and freeing at one site at once (issue 29, "threads
//! at native pace"): the site's and its module's totals stay exact, and
//! so does their high water, for a pattern whose true high water is
//! known. Two, four and twelve threads (twelve is past the library's
//! eight lanes), synchronized by a barrier into phases:
//! each thread enters a leak, then per round allocates its big blocks
//! (all threads at once, interleaved), all hold them at a barrier (the
//! round's peak: the leaks plus every thread's big blocks), each frees
//! another thread's blocks (cross-thread frees, all at once), then all
//! churn small blocks (one live per thread, far below the peak). The
//! site's and the module's high water is exactly the largest round's peak
//! in any order of the calls the program allows; current bytes are the
//! leaks; blocks and bytes allocated are known sums. Run with the default
//! exact mode, with whole stacks, and with `--peak` (the global lock).

use profdev_mprof::{Report, Session, STACKS_ENV};
use std::process::Command;

const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdlib.h>
#define R 12
#define K 64
#define N 20000
static int T;
static pthread_barrier_t bar;
static void *blocks[16][K];
__attribute__((noinline)) static void *get(size_t n) { void *p = malloc(n); __asm__ volatile("" ::: "memory"); return p; }
static size_t big(int i, int r) { return 256 + 16 * ((i * 7 + r * 3) % 11); }
static void *work(void *arg) {
    int i = (int)(long)arg;
    static void *leak[16];
    leak[i] = get(1000 + i);
    pthread_barrier_wait(&bar);
    for (int r = 0; r < R; r++) {
        for (int k = 0; k < K; k++)
            blocks[i][k] = get(big(i, r));
        pthread_barrier_wait(&bar); /* all live: the round's peak */
        pthread_barrier_wait(&bar);
        for (int k = 0; k < K; k++)
            free(blocks[(i + 1) % T][k]);
        pthread_barrier_wait(&bar);
        for (int j = 0; j < N; j++) {
            char *p = get(16 + (j + i) % 49);
            p[0] = 1;
            free(p);
        }
        pthread_barrier_wait(&bar);
    }
    return 0;
}
int main(int argc, char **argv) {
    T = atoi(argv[1]);
    pthread_t t[16];
    pthread_barrier_init(&bar, 0, T);
    for (long i = 0; i < T; i++)
        pthread_create(&t[i], 0, work, (void *)i);
    for (int i = 0; i < T; i++)
        pthread_join(t[i], 0);
    return 0;
}
"#;

const R: u64 = 12;
const K: u64 = 64;
const N: u64 = 20000;

fn big(i: u64, r: u64) -> u64 {
    256 + 16 * ((i * 7 + r * 3) % 11)
}

/// (allocs, bytes, current, live, high water) the program's one site must
/// show with `threads` threads.
fn expected(threads: u64) -> (u64, u64, i64, u64, i64) {
    let leaks: u64 = (0..threads).map(|i| 1000 + i).sum();
    let rounds = (0..R).map(|r| (0..threads).map(|i| K * big(i, r)).sum::<u64>());
    let peak = leaks + rounds.clone().max().unwrap();
    let churn: u64 = (0..threads)
        .map(|i| (0..N).map(|j| 16 + (j + i) % 49).sum::<u64>())
        .sum();
    assert!(
        leaks + threads * 64 < peak,
        "the churn stays below the peak"
    );
    let allocs = threads * (1 + R * K + R * N);
    let bytes = leaks + rounds.sum::<u64>() + R * churn;
    (allocs, bytes, leaks as i64, threads, peak as i64)
}

/// The report of one run of the program with `threads` threads.
fn run(exe: &std::path::Path, threads: u64, env: &[(&str, &str)]) -> Report {
    let session = Session::new().unwrap();
    let status = Command::new(exe)
        .arg(threads.to_string())
        .envs(session.env(None, &[], false))
        .envs(env.iter().copied())
        .status()
        .unwrap();
    assert!(status.success());
    let (mut reports, errors) = session.reports();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(reports.len(), 1, "one process");
    reports.pop().unwrap()
}

#[test]
fn threads_at_one_site_keep_exact_totals_and_high_water() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("threads.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.path().join("threads");
    profdev_testkit::cc(&src, &["-O1", "-fno-omit-frame-pointer", "-pthread"], &exe);
    let modes: [&[(&str, &str)]; 3] = [&[], &[(STACKS_ENV, "1")], &[("PROFDEV_MPROF_PEAK", "1")]];
    // 12: threads past the library's 8 lanes, which take the module's
    // lock (and send it back to the lock for good, its lanes closed).
    for threads in [2, 4, 12] {
        let want = expected(threads);
        for env in modes {
            let report = run(&exe, threads, env);
            let m = report
                .modules
                .iter()
                .position(|m| m.path == exe.to_str().unwrap())
                .expect("the program's module");
            let sites: Vec<_> = report
                .sites
                .iter()
                .filter(|s| s.module == Some(m))
                .collect();
            assert_eq!(sites.len(), 1, "one site: {sites:?}");
            let s = sites[0];
            let got = (s.allocs, s.bytes, s.current, s.live, s.high_water);
            assert_eq!(got, want, "{threads} threads, {env:?}");
            let module = &report.modules[m];
            assert_eq!(
                (module.current, module.high_water),
                (want.2, want.4),
                "the module: {threads} threads, {env:?}"
            );
            if !env.is_empty() && env[0].0 == STACKS_ENV {
                let (allocs, bytes, live, current) = report
                    .stacks
                    .iter()
                    .filter(|st| st.frames.first().map(|f| f.0) == Some(Some(m)))
                    .fold((0, 0, 0, 0), |a, st| {
                        (
                            a.0 + st.allocs,
                            a.1 + st.bytes,
                            a.2 + st.live,
                            a.3 + st.current,
                        )
                    });
                assert_eq!(
                    (allocs, bytes, current, live),
                    (want.0, want.1, want.2, want.3)
                );
            }
            if let Some(peak) = report.peak {
                assert!(peak >= want.4 as u64, "the global peak holds the site's");
            }
        }
    }
}
