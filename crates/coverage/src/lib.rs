//! prof's coverage mode (`startcp`, `cprof`): exact execution counts of a
//! module's code, measured without a rebuild, and the views that read them.
//!
//! [`counts`] is the one model every part shares: the engine that plans
//! and counts fills a [`counts::ModuleCoverage`] per module; the device's
//! histogram, cprof's listing, the `.prf` records and the lcov and
//! Cobertura exports read it.
//!
//! The engine: [`plan`] cuts a module into blocks and decides how each is
//! counted, [`encode`] makes its trampolines (position-independent: one
//! encoding serves every load and process whose area lies at the same
//! distance from the module, copied with its counters relocated), and
//! [`launch`] runs a command with the runtime preloaded and collects the
//! counts ([`launch::launch`]; the runtime's entry for attach mode is
//! described there). A statically linked program, which has no loader to
//! preload through, is patched by profdev itself at its first stop, through
//! ptrace ([`traced`]: the same plans and trampolines, no runtime in the
//! process), or, where ptrace is refused, counted by [`uprobe`]: the same
//! plan's blocks, one multi-uprobe BPF link, the same
//! [`counts::ModuleCoverage`].
//! [`cache`] keeps plans and encodings on disk between runs, keyed by the
//! module's bytes, the engine's sources and the plan's mode.
//!
//! **Hit mode** ([`plan::Mode::Hits`], cprof's marks without `-f`):
//! the same blocks, but a probe only records that its block ran: one
//! `int3` at the block's start that the runtime's SIGTRAP handler
//! removes at its first hit, marking the block and putting the original
//! byte back ([`plan::How::Once`]: no trampoline; later runs are native);
//! in functions that may run with SIGTRAP blocked (the C library's own,
//! around `pthread_create`, `posix_spawn`, `raise`) the trampolines stay, storing a byte
//! (`movb $1,%gs:8*i`: no flag written, none saved). A block whose run
//! another block's implies has no probe ([`plan::How::Implied`]), and no
//! branch edge is stored but those a derived block reads; each block's
//! count is then 1 or 0. [`plan::Mode::Edges`] (`cprof --hits --lcov`)
//! adds each conditional jump's edges, 1 or 0: read from the target's
//! hit where the edge is its only way in, else stored as a byte by the
//! jump's trampoline, which it keeps. The device's
//! histograms, `-f`, `.prf`, lcov (but with `--hits`) and `gmon --exact` always count. [`image`] reads of a module's
//! file only what its ELF headers name, within stated bounds (the planning
//! server may be root, reading for another user's process: see
//! [`launch`]'s Bounds).
//!
//! # Limits (each reported where it applies, never hidden)
//!
//! * **Reach.** Programs are rewritten through the loader (`LD_PRELOAD`):
//!   setuid programs are not reached; static binaries run by profdev are
//!   patched through ptrace ([`traced`]), those ptrace cannot reach (and
//!   running static processes) counted by the slower [`uprobe`] fallback
//!   (one multi-uprobe BPF link: Linux 6.6 or later, CAP_BPF and
//!   CAP_PERFMON); the vDSO and
//!   code that is not file-backed (JIT, self-modifying code) are not
//!   planned. Code run before the runtime's constructor (the loader's own
//!   start, the initializers of libc and of libraries loaded before the
//!   runtime) is not counted; the executable is counted from `_start`.
//!   A library is covered when it is mapped at start or when the program's
//!   `dlopen` returns (its initializers, run inside dlopen, are not
//!   counted; a library libc loads on its own, such as an NSS module, is
//!   covered at the next dlopen).
//! * **Hit mode's derived marks.** A block whose mark is read from the
//!   blocks it leads to and dominates (`plan/dom.rs`) is marked once one
//!   of them runs, though it ran before its probe was in: the loader's
//!   `call_init`, run before the runtime's constructor, shows `+`;
//!   attached (`cprof -p`), so does a function's entry or a loop's guard
//!   a thread passed before the attach, on its way into a loop it still
//!   runs.
//! * **Hit mode's launch window.** At a launch in hit mode, the code
//!   pages that hold one-shot probes stay writable (RWX) while the
//!   program keeps reaching new code, so a probe's first hit puts its
//!   byte back by a store, not a write to `/proc/self/mem` (`python3 -c
//!   pass`: 0.30 to 0.23 s in alternated runs). The window is a second
//!   (`PROFDEV_COV_WINDOW_MS`, milliseconds; `0`: none) from the end of
//!   the runtime's patching at start, moved on by every 16th hit. The
//!   pages are made R-X again at a hit or interposed call (`dlopen`,
//!   `fork`, `pthread_create`) past it, and at once before the program's
//!   own `mprotect`, `mmap`, `munmap` or `mremap` of one of them. A
//!   process that does none of these after the window keeps them
//!   writable until it exits. A program that changes its own code's
//!   protection by a raw system call within the window may crash at its
//!   next probe. Attaching (`cprof -p`) and a later `dlopen` open none.
//! * **Copied or read code.** A module's code mapped with holes between
//!   its executable pages (node's binary) is patched run by run. Code the
//!   module copies at run time and runs there (V8's embedded builtins in
//!   node, found by their symbol `v8_Default_embedded_blob_code_`: a
//!   stripped node crashes) and functions whose bytes the code reads as
//!   data are not patched: their blocks are reported uncounted ("N of M
//!   blocks could not be counted", and a note for V8's), never as not run.
//! * **Short blocks.** A block shorter than a 5-byte jump that is entered
//!   only by falling through a counted conditional jump takes that jump's
//!   fall-through count (no patch); otherwise it gets a 2-byte
//!   jump to a 5-byte one placed in the dead bytes of a nearby block (one
//!   whose trampoline copies it whole); where there is none within 128
//!   bytes, or the block is 1 byte long, it is counted through `int3` and
//!   the runtime's SIGTRAP handler (about 1.5 µs per entry from unpatched
//!   code; entries from other trampolines go straight in; the count of
//!   traps is in the notes). In code that may run with every signal blocked (functions that
//!   change the signal mask or create threads or processes, and what they
//!   call, two calls deep) a trap would kill, so such blocks are not
//!   counted: `uncounted`. The runtime keeps SIGTRAP out of the masks the
//!   program sets, and chains a SIGTRAP handler the program installs.
//! * **Leaders.** Jump tables (gcc's and clang's forms, absolute or
//!   relative) and every code address stored in the module's data or
//!   relocations are leaders; in a function with an indirect jump through
//!   an indexed memory operand that is not recognized, a jump only ever
//!   overwrites one instruction. A computed jump target stored nowhere
//!   would make the counts of the block holding it wrong.
//! * **Threads** made with `pthread_create` count into their own arrays
//!   (no count lost); a thread made with a raw `clone` shares its
//!   creator's array (its counts may race). When libc is covered, the few
//!   blocks of libc's thread start before the runtime's wrapper runs count
//!   into the creator's array.
//! * **fork**: the child reports what it ran after the fork; when libc is
//!   covered, libc's fork code between the last atfork handler and the
//!   system call is counted in parent and child. **exec**: the old image
//!   reports first; the new one is planned afresh.
//! * **libc's counts** include the runtime's own calls (planning requests,
//!   the report).
//! * **Reports** are written at exit, `_exit`, before exec, and on a
//!   SIGINT, SIGTERM or SIGHUP the program does not handle; a process
//!   killed otherwise writes none (its counts are lost, the others stay).
//! * **Kernel**: x86-64 Linux; `arch_prctl(ARCH_SET_GS)`;
//!   `MAP_FIXED_NOREPLACE` (4.17) to place trampolines within ±2 GiB of
//!   each module (on older kernels the placement is checked and retried).

pub mod arcs;
pub mod cache;
pub mod counts;
pub mod encode;
pub mod fuzzing;
pub mod image;
pub mod insns;
pub mod launch;
pub mod lcov;
pub mod lines;
pub mod listing;
pub mod plan;
pub mod prf;
pub mod traced;
pub mod uprobe;
