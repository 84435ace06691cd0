//! The file server: profdev's devices as real files, through FUSE.
//!
//! # Synopsis
//!
//! ```no_run
//! use profdev_fuse::{mount, MountOptions, Server};
//! # fn devices() -> Vec<std::sync::Arc<dyn profdev_dev::Dev>> { vec![] }
//! let server = Server::new(devices())?
//!     .with_log(std::sync::Arc::new(|line: &str| eprintln!("profdev: {line}")));
//! let mounted = mount(server, "/run/profdev".as_ref(), MountOptions::default())?;
//! mounted.run()?; // until unmounted
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Description
//!
//! [`Server`] serves any table of [`Dev`](profdev_dev::Dev)s; adding a
//! device needs no change here. Each device's files come from its `gen`
//! (the file tree as data): a device with an empty `dir_name` puts them at
//! the mount root, as `bind -a '#K' /dev` did (kprof's `kpctl` and
//! `kpdata`); another gets a directory of that name.
//!
//! * **Names and numbers.** An inode number is computed from the device's
//!   index and the file's qid, so it is stable and never shared. Nothing is
//!   cached by the kernel (zero TTLs): a device's tree and lengths may
//!   change between two calls.
//! * **Reads and writes** are direct I/O: every `read(2)` reaches the
//!   device with its exact offset and size (`dd bs=4` reads one kpdata
//!   word), whatever `stat` says the length is, and `stat` shows the
//!   device's true length. A channel its device marks `stream` is
//!   opened FOPEN_STREAM: it has no file position, so every `read(2)` and
//!   `write(2)` starts at offset 0. No device does: every file ends, with
//!   `read` returning 0 at the length `stat` gives (or, for a file whose
//!   length is 0 like prof's `histogram`, when the device has no more).
//! * **Truncation.** `echo start >kpctl` truncates before it writes; a
//!   truncation to 0 of a writable file succeeds and does nothing. Every
//!   other attribute change fails with EPERM.
//! * **Errors** become errno values in one place, [`errno()`]: a bad
//!   control message is EINVAL, and the server logs it quoted
//!   (`kprof: write to kpctl failed: unknown control message "stopwatch"`).
//! * **ioctl** passes `cmd`, the by-value `arg`, the bytes in and the room
//!   out to the device, and returns the device's result as the ioctl's
//!   value (fuser is patched to hand over `arg`: see vendor/README.md).
//! * **poll** is always ready for what the open mode allows.
//! * **Permissions.** Files belong to the user who mounted; the kernel
//!   checks the devices' modes (`default_permissions,allow_other`), so a
//!   0600 file gives other users EACCES. That is the first wall; the rule
//!   is checked by the server itself ([`Server::with_access`],
//!   [`profdev_dev::access`]): every open, read, write, truncation, ioctl,
//!   and every lookup or listing inside a device's directory, is refused
//!   with EACCES unless the request's uid is root's, the mounting user's,
//!   or one the mount names (`--allow-user`, `--allow-group`). The
//!   request's credentials reach the device in [`Chan::cred`], so a control
//!   message that names a process can be held to the kernel's
//!   ptrace-attach rule ([`profdev_dev::access::ptrace_may_attach`]).
//!
//! [`Chan::cred`]: profdev_dev::Chan
//! * **Concurrency.** Several threads serve requests; each open file has
//!   its own channel, so readers at once each get their own snapshot.
//!
//! [`mount`] mounts with mount(2) directly (root, or CAP_SYS_ADMIN; no
//! fusermount), as `fuse.profdev`. [`unmount`] detaches lazily, so it works
//! while files are held open, and also clears a dead mount whose server
//! was killed ([`clear_dead`]).
//!
//! # Bugs
//!
//! Some ioctl commands never reach a device: the kernel's VFS answers them
//! itself for every file, among them the bare numbers 1 (FIBMAP) and 2
//! (FIGETBSZ), and FIONREAD, FIOCLEX, FIONBIO. Devices number their
//! commands `_IO(type, nr)` with a type byte of their own (prf uses
//! `_IO('P', n)`). Commands without `_IOC` size bits carry no buffers
//! through FUSE, only `cmd`, `arg` and the result.
//!
//! Qid numbers of 2^47 and above cannot be served. In a nested directory
//! `..` is listed with the mount root's inode number. Files are direct
//! I/O, so they cannot be mmap'ed.

#![forbid(unsafe_code)]

mod errno;
mod mount;
mod serve;
mod server;

pub use errno::errno;
pub use mount::{
    check_ancestors, check_can_mount, check_empty, check_mount_point, clear_dead, how_to_mount,
    log_path, mount, mount_dir, resolve, state, unmount, Background, MountError, MountOptions,
    MountState, Mounted, Unmounted, DEFAULT_MOUNT_DIR, DEV_FUSE, FSTYPE, MOUNT_VAR, SOURCE,
};
pub use serve::{
    block_stop_signals, group_id, prepare, serve, start_background, user_id, Serving, Started,
    GRACE,
};
pub use server::{Log, ServeError, Server, MAX_DEVICES};
