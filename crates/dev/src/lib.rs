//! The device layer: profdev's classic devices behind one trait.
//!
//! Plan 9 made every device one small file filling one uniform table, its
//! files described as data. profdev does the same:
//!
//! * [`Dev`] is the trait; a device implements `gen` (its file tree, as data)
//!   and whichever of `read`, `write`, `ioctl` it needs. The others refuse.
//! * [`access`] states who may use a mount (checked by the file server on
//!   every request) and the kernel's ptrace-attach rule that a control
//!   message naming a process must pass.
//! * [`ctl`] parses control messages through a command table (exact verbs,
//!   never prefixes) and quotes bad messages back.
//! * [`engine`] opens sampling sessions for devices that are switched on and
//!   feeds them records from whatever [`SourceFactory`] it was given: the
//!   live perf_event engine, or a replay in tests.
//! * [`kit`] is what every sampling device shares, written once: the
//!   session, the sink, the open-mode rule, snapshots, error mapping.
//! * [`health`] is what a device says about itself while it runs, kept by
//!   the kit's session; [`stat`] serves it as `stat/NAME`, one file per
//!   device that has one.
//! * [`devtab()`] is the device table: adding a device is one line there.
//! * [`outside`] attributes the ticks outside kernel text (per process,
//!   user function, kernel-module symbol) for `profdev sample`; `report`
//!   renders them.
//!
//! No FUSE type appears here: the file server (`profdev-fuse`) serves any
//! table of devices, and tests drive devices directly.
//!
//! [`SourceFactory`]: profdev_core::SourceFactory

// No unsafe code in the library; only unit tests call getuid(2).
#![cfg_attr(not(test), forbid(unsafe_code))]

pub mod access;
pub mod ctl;
pub mod engine;
pub mod health;
pub mod kgmon;
pub mod kit;
pub mod kprof;
pub mod outside;
mod pc_counts;
pub mod prf;
pub mod prof;
pub mod stat;

mod dev;
mod devtab;
mod error;
pub mod top;
pub mod tree;

#[doc(hidden)]
pub mod fuzzing;

pub use access::{AccessRules, Cred};
pub use dev::Dev;
pub use devtab::{devtab, DevContext};
pub use engine::{Engine, Subscription};
pub use error::DevError;
pub use tree::{Chan, DirEntry, OpenMode, Qid};
