//! Threads churning at two sites of one module (issue 29 item 2, c/mprof.c's
//! "lanes": each thread's delta and allowance per site, folded under the
//! module's lock): the sites' and the module's totals and high water stay
//! exact, for a pattern whose true high waters are known (barriers order
//! the phases: per round every thread allocates big blocks at both sites,
//! all hold them at a barrier, each frees another thread's, then all
//! churn small blocks at both sites far below the peaks). The sites' peaks
//! fall in other rounds than the module's, so each high water is checked
//! on its own. Then the same program killed with SIGKILL at its end, its
//! last blocks live: the shared table, lanes and all, gives the same
//! exact counts (what the lanes hold is part of the table). With 2, 4 and
//! 12 threads (more than the lanes: the module's lock takes over).

use profdev_mprof::{Report, Session};
use std::process::Command;

const PROGRAM: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#define R 10
#define K 48
#define N 30000
#define F 5
static int T, KILL;
static pthread_barrier_t bar;
static void *blocks[16][2][K];
__attribute__((noinline)) static void *get_a(size_t n) { void *p = malloc(n); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) static void *get_b(size_t n) { void *p = malloc(n); __asm__ volatile("" ::: "memory"); return p; }
static size_t big_a(int i, int r) { return 200 + 24 * ((i * 5 + r * 7) % 13); }
static size_t big_b(int i, int r) { return 300 + 40 * ((i * 3 + r * 4) % 9); }
static void *work(void *arg) {
    int i = (int)(long)arg;
    static void *leak[16][2];
    leak[i][0] = get_a(500 + i);
    leak[i][1] = get_b(700 + 2 * i);
    pthread_barrier_wait(&bar);
    for (int r = 0; r < R; r++) {
        for (int k = 0; k < K; k++) {
            blocks[i][0][k] = get_a(big_a(i, r));
            blocks[i][1][k] = get_b(big_b(i, r));
        }
        pthread_barrier_wait(&bar); /* all live: the round's peak */
        pthread_barrier_wait(&bar);
        for (int k = 0; k < K; k++) {
            free(blocks[(i + 1) % T][0][k]);
            free(blocks[(i + 1) % T][1][k]);
        }
        pthread_barrier_wait(&bar);
        for (int j = 0; j < N; j++) {
            char *p = get_a(16 + (j + i) % 41);
            char *q = get_b(16 + (j * 3 + i) % 37);
            p[0] = q[0] = 1;
            free(p);
            free(q);
        }
        pthread_barrier_wait(&bar);
    }
    for (int k = 0; k < F; k++) /* live at the end */
        ((char *)get_a(64 + 16 * i + k))[0] = 1;
    pthread_barrier_wait(&bar);
    if (KILL && i == 0)
        kill(getpid(), SIGKILL);
    return 0;
}
int main(int argc, char **argv) {
    T = atoi(argv[1]);
    KILL = argc > 2;
    pthread_t t[16];
    pthread_barrier_init(&bar, 0, T);
    for (long i = 0; i < T; i++)
        pthread_create(&t[i], 0, work, (void *)i);
    for (int i = 0; i < T; i++)
        pthread_join(t[i], 0);
    return 0;
}
"#;

const R: u64 = 10;
const K: u64 = 48;
const N: u64 = 30000;
const F: u64 = 5;

fn big_a(i: u64, r: u64) -> u64 {
    200 + 24 * ((i * 5 + r * 7) % 13)
}

fn big_b(i: u64, r: u64) -> u64 {
    300 + 40 * ((i * 3 + r * 4) % 9)
}

/// What a site (or the module) must show: allocs, bytes, current, live,
/// high water.
type Want = (u64, u64, i64, u64, i64);

/// Site a, site b and the module's (current, high water) with `t` threads.
fn expected(t: u64) -> (Want, Want, (i64, i64)) {
    let leak_a: u64 = (0..t).map(|i| 500 + i).sum();
    let leak_b: u64 = (0..t).map(|i| 700 + 2 * i).sum();
    let fin: u64 = (0..t)
        .flat_map(|i| (0..F).map(move |k| 64 + 16 * i + k))
        .sum();
    let round_a: Vec<u64> = (0..R)
        .map(|r| (0..t).map(|i| K * big_a(i, r)).sum())
        .collect();
    let round_b: Vec<u64> = (0..R)
        .map(|r| (0..t).map(|i| K * big_b(i, r)).sum())
        .collect();
    let max = |v: &[u64]| *v.iter().max().unwrap();
    let both: Vec<u64> = round_a.iter().zip(&round_b).map(|(a, b)| a + b).collect();
    let churn_a: u64 = (0..t)
        .map(|i| (0..N).map(|j| 16 + (j + i) % 41).sum::<u64>())
        .sum();
    let churn_b: u64 = (0..t)
        .map(|i| (0..N).map(|j| 16 + (j * 3 + i) % 37).sum::<u64>())
        .sum();
    // The churn and the last blocks stay below every peak.
    assert!(leak_a + fin + t * 64 < leak_a + max(&round_a));
    let a = (
        t * (1 + R * K + R * N + F),
        leak_a + round_a.iter().sum::<u64>() + R * churn_a + fin,
        (leak_a + fin) as i64,
        t * (1 + F),
        (leak_a + max(&round_a)) as i64,
    );
    let b = (
        t * (1 + R * K + R * N),
        leak_b + round_b.iter().sum::<u64>() + R * churn_b,
        leak_b as i64,
        t,
        (leak_b + max(&round_b)) as i64,
    );
    let module = (
        (leak_a + leak_b + fin) as i64,
        (leak_a + leak_b + max(&both)) as i64,
    );
    (a, b, module)
}

/// The report of one run with `threads` threads (killed: SIGKILL at the end).
fn run(exe: &std::path::Path, threads: u64, killed: bool) -> Report {
    let session = Session::new().unwrap();
    let mut cmd = Command::new(exe);
    cmd.arg(threads.to_string());
    if killed {
        cmd.arg("kill");
    }
    let status = cmd.envs(session.env(None, &[], false)).status().unwrap();
    assert_eq!(status.success(), !killed, "{status:?}");
    let (mut reports, errors) = session.reports();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(reports.len(), 1, "one process");
    reports.pop().unwrap()
}

#[test]
fn threads_at_two_sites_of_one_module_keep_exact_totals_and_high_waters() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("lanes.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.path().join("lanes");
    profdev_testkit::cc(&src, &["-O1", "-fno-omit-frame-pointer", "-pthread"], &exe);
    // 12 threads: more than a module's lanes (8 a site, 12 open at once):
    // the module goes back to its lock, as exact.
    for threads in [2, 4, 12] {
        let (a, b, module) = expected(threads);
        assert_ne!(a.4 + b.4, module.1, "the sites peak in other rounds");
        for killed in [false, true] {
            let report = run(&exe, threads, killed);
            let m = report
                .modules
                .iter()
                .position(|m| m.path == exe.to_str().unwrap())
                .expect("the program's module");
            let mut sites: Vec<Want> = report
                .sites
                .iter()
                .filter(|s| s.module == Some(m))
                .map(|s| (s.allocs, s.bytes, s.current, s.live, s.high_water))
                .collect();
            sites.sort_by_key(|s| std::cmp::Reverse(s.0));
            assert_eq!(sites, vec![a, b], "{threads} threads, killed {killed}");
            let got = &report.modules[m];
            assert_eq!(
                (got.current, got.high_water),
                module,
                "the module: {threads} threads, killed {killed}"
            );
        }
    }
}
