//! monitor(3C) with the SVR4 semantics, writing mon.out.
//!
//! # Synopsis
//!
//! ```c
//! void monitor(int (*lowpc)(), int (*highpc)(), unsigned short *buffer,
//!              size_t bufsize, size_t nfunc);
//! monitor((int (*)())0, 0, 0, 0, 0);   /* stop and write mon.out */
//! ```
//!
//! # Description
//!
//! `monitor(lowpc, highpc, buffer, bufsize, nfunc)` registers `buffer`
//! (`bufsize` 16-bit WORDs) for the text `lowpc..highpc`:
//!
//! * region 1, the header `{lpc, hpc, nfns}` (24 bytes, see
//!   [`crate::mon_out`]), is written into the start of the buffer;
//! * region 2 holds `nfunc` call counters of 16 bytes each;
//! * region 3, the remaining `bufsize - ssiz` WORDs, becomes the
//!   histogram, with `ssiz = (24 + 16·nfunc) / 2`.
//!
//! If `ssiz >= bufsize` or `lowpc >= highpc`, monitor returns and does
//! nothing. Otherwise it computes the profil scale from the text size in
//! WORDs `text = ceil((highpc - lowpc) / 2)`: if the histogram is smaller,
//! `scale = (int)((double)hist_words * 0x10000 / text)`, else 0xffff
//! ([`scale`]), and calls `profil(histogram, hist_words*2, lowpc, scale)`.
//! Each call registers another block and replaces the profil of the
//! previous one.
//!
//! The output name comes from `PROFDIR` at registration: unset, `mon.out`;
//! set but empty, no profiling at all (monitor returns before profil);
//! otherwise `$PROFDIR/<pid>.<basename of argv[0]>` ([`output_path`]).
//!
//! `monitor(NULL, ...)` finishes: if a block was registered, it calls
//! `profil(NULL, 0, 0, 0)` and writes the output file (mode 0666 less the
//! umask; through `profdev_safefile`, a unique temporary renamed over the
//! name, so a link planted there is replaced, never followed): one
//! summary header with the `lpc`/`hpc` of the last block and `nfns` = the
//! sum of all blocks' `nfunc`, all blocks' counter regions in registration
//! order, then the last block's histogram. On failure it prints
//! `<file>: <error>` on stderr, as `perror(mon_out)` did.
//!
//! The buffers must stay valid until `monitor(NULL, ...)`, as SVR4 says
//! ("no block passed to monitor() may be freed, until it is called to clean
//! up"). The safe [`Monitor`] owns its buffer instead.
//!
//! # Bugs
//!
//! Nothing fills the call counters: SVR4 filled them from `_mcount`, which
//! `cc -p` compiled into every function; this library provides no
//! `_mcount`. The counters are written as found in the buffer (normally
//! zero). After `monitor(NULL, ...)` the registered blocks are forgotten
//! (SVR4 kept them, so a second call wrote the file again). SVR4 printed
//! the pid with at most 5 digits (a larger pid produced a non-digit); here
//! it is printed in full.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::Error;
use crate::mon_out::{FnCount, MonOut, CNT_BYTES, HDR_BYTES};
use crate::profil::{self, Config};

/// monitor's profil scale for a text of `text_bytes` and a histogram of
/// `hist_words` cells.
pub fn scale(text_bytes: usize, hist_words: usize) -> u32 {
    let text = text_bytes.div_ceil(2);
    if hist_words < text {
        (hist_words as f64 * 65536.0 / text as f64) as u32
    } else {
        0xffff
    }
}

/// Regions 1 and 2 in WORDs: `(24 + 16·nfunc) / 2`.
pub fn header_words(nfunc: usize) -> usize {
    nfunc.saturating_mul(CNT_BYTES).saturating_add(HDR_BYTES) / 2
}

/// The output file name for the `PROFDIR` value `profdir`; `None` when
/// `PROFDIR` is set but empty (no profiling).
pub fn output_path(profdir: Option<&OsStr>, pid: u32, argv0: Option<&OsStr>) -> Option<PathBuf> {
    match profdir {
        None => Some(PathBuf::from("mon.out")),
        Some(d) if d.is_empty() => None,
        Some(d) => {
            let name: OsString = match argv0 {
                Some(a) if !a.is_empty() => {
                    let bytes = a.as_bytes();
                    let base = match bytes.iter().rposition(|&b| b == b'/') {
                        Some(i) => &bytes[i + 1..],
                        None => bytes,
                    };
                    OsStr::from_bytes(base).to_os_string()
                }
                _ => OsString::from("mon.out"),
            };
            let mut s = d.to_os_string();
            s.push(format!("/{pid}."));
            s.push(name);
            Some(PathBuf::from(s))
        }
    }
}

fn output_path_from_env() -> Option<PathBuf> {
    let dir = std::env::var_os("PROFDIR");
    let argv0 = std::env::args_os().next();
    output_path(dir.as_deref(), std::process::id(), argv0.as_deref())
}

/// One registered buffer.
#[derive(Debug, Clone, Copy)]
struct Block {
    buffer: usize,
    nfunc: usize,
    lpc: usize,
    hpc: usize,
    hist_words: usize,
}

impl Block {
    /// Check the arguments, write region 1, start profil on region 3.
    ///
    /// # Safety
    /// `buffer` must be valid for `bufsize` WORDs until profiling into it stops.
    unsafe fn register(
        lowpc: usize,
        highpc: usize,
        buffer: *mut u16,
        bufsize: usize,
        nfunc: usize,
    ) -> Result<(Block, u64), Error> {
        let ssiz = header_words(nfunc);
        if ssiz >= bufsize {
            return Err(Error::MonitorBufferTooSmall { bufsize, nfunc });
        }
        if lowpc >= highpc {
            return Err(Error::EmptyTextRange {
                call: "monitor",
                lowpc,
                highpc,
            });
        }
        let hdr = buffer as *mut u8;
        // SAFETY: the buffer holds at least ssiz >= 12 WORDs = 24 bytes; the
        // header is written unaligned in the native LP64 layout of `struct hdr`.
        unsafe {
            (hdr as *mut u64).write_unaligned(lowpc as u64);
            (hdr.add(8) as *mut u64).write_unaligned(highpc as u64);
            (hdr.add(16) as *mut i32).write_unaligned(nfunc as i32);
            (hdr.add(20) as *mut i32).write_unaligned(0);
        }
        let hist_words = bufsize - ssiz;
        let cfg = Config {
            // SAFETY: ssiz < bufsize, inside the buffer.
            buf: unsafe { buffer.add(ssiz) } as usize,
            bufsiz: hist_words * 2,
            offset: lowpc,
            scale: scale(highpc - lowpc, hist_words),
        };
        // SAFETY: per this function's contract.
        let generation = unsafe { profil::set(cfg)? };
        let block = Block {
            buffer: buffer as usize,
            nfunc,
            lpc: lowpc,
            hpc: highpc,
            hist_words,
        };
        Ok((block, generation))
    }

    /// Region 2, decoded from the native layout.
    ///
    /// # Safety
    /// The buffer must still be valid.
    unsafe fn counts(&self) -> Vec<FnCount> {
        let base = (self.buffer + HDR_BYTES) as *const u8;
        (0..self.nfunc)
            .map(|i| {
                // SAFETY: region 2 lies inside the registered buffer.
                unsafe {
                    let p = base.add(i * CNT_BYTES);
                    FnCount {
                        fnpc: (p as *const u64).read_unaligned(),
                        mcnt: (p.add(8) as *const i64).read_unaligned(),
                    }
                }
            })
            .collect()
    }

    /// Region 3.
    ///
    /// # Safety
    /// The buffer must still be valid and no longer profiled into.
    unsafe fn histogram(&self) -> Vec<u16> {
        let p = (self.buffer as *const u16).wrapping_add(header_words(self.nfunc));
        // SAFETY: region 3 lies inside the registered buffer.
        unsafe { std::slice::from_raw_parts(p, self.hist_words).to_vec() }
    }
}

/// writeBlocks(): the summary of all blocks, histogram of the last.
///
/// # Safety
/// Every block's buffer must still be valid, and profiling stopped.
unsafe fn summarize(blocks: &[Block]) -> MonOut {
    let last = blocks.last().expect("at least one block");
    let mut counts = Vec::new();
    for b in blocks {
        // SAFETY: per this function's contract.
        counts.extend(unsafe { b.counts() });
    }
    MonOut {
        lpc: last.lpc as u64,
        hpc: last.hpc as u64,
        counts,
        // SAFETY: per this function's contract.
        hist: unsafe { last.histogram() },
    }
}

/// mon.out through `profdev_safefile`: a unique temporary beside it,
/// renamed over it (a symbolic link there is replaced, never followed),
/// mode 0666 less the umask as the C library's `creat`.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    profdev_safefile::write_file(path, bytes, 0o666).map_err(|e| Error::Write {
        path: path.to_path_buf(),
        source: e.into_os_error(),
    })
}

/// The C monitor(3C)'s process-wide list of blocks.
struct Registry {
    blocks: Vec<Block>,
    mon_out: Option<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    blocks: Vec::new(),
    mon_out: None,
});

/// What a monitor call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Monitored {
    /// A block was registered and profiling started; the file to be written.
    Started(PathBuf),
    /// `PROFDIR` is set and empty: no profiling on this run.
    Disabled,
}

/// monitor(3C) with a non-null `lowpc`: register a block (C semantics).
///
/// # Safety
/// `buffer` must be valid for `bufsize` WORDs, and not otherwise written,
/// until [`finish`] returns.
pub unsafe fn register(
    lowpc: usize,
    highpc: usize,
    buffer: *mut u16,
    bufsize: usize,
    nfunc: usize,
) -> Result<Monitored, Error> {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let ssiz = header_words(nfunc);
    if ssiz >= bufsize {
        return Err(Error::MonitorBufferTooSmall { bufsize, nfunc });
    }
    if lowpc >= highpc {
        return Err(Error::EmptyTextRange {
            call: "monitor",
            lowpc,
            highpc,
        });
    }
    let Some(path) = output_path_from_env() else {
        return Ok(Monitored::Disabled);
    };
    // SAFETY: per this function's contract.
    let (block, _) = unsafe { Block::register(lowpc, highpc, buffer, bufsize, nfunc)? };
    r.blocks.push(block);
    r.mon_out = Some(path.clone());
    Ok(Monitored::Started(path))
}

/// `monitor(NULL, ...)`: stop profiling and write the file. Returns the file
/// written, or `None` if no block was registered.
pub fn finish() -> Result<Option<PathBuf>, Error> {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    if r.blocks.is_empty() {
        return Ok(None);
    }
    // SAFETY: turning profiling off needs no buffer.
    unsafe { profil::set(Config::OFF)? };
    let blocks = std::mem::take(&mut r.blocks);
    let path = r.mon_out.take().unwrap_or_else(|| PathBuf::from("mon.out"));
    // SAFETY: register's contract keeps the buffers valid until now, and
    // profiling is off.
    let m = unsafe { summarize(&blocks) };
    write_file(&path, &m.to_bytes()?)?;
    Ok(Some(path))
}

/// monitor(3C) over an owned buffer: one block, written by [`Monitor::finish`].
pub struct Monitor {
    buffer: *mut u16,
    len: usize,
    block: Block,
    generation: u64,
    path: PathBuf,
}

// SAFETY: the buffer is owned; see profil::Profil.
unsafe impl Send for Monitor {}

impl Monitor {
    /// Register `buffer` for the text `text` with room for `nfunc` call
    /// counters and start profiling. `Ok(None)` when `PROFDIR` is set and
    /// empty (no profiling on this run).
    pub fn start(
        text: std::ops::Range<usize>,
        buffer: Box<[u16]>,
        nfunc: usize,
    ) -> Result<Option<Monitor>, Error> {
        let Some(path) = output_path_from_env() else {
            return Ok(None);
        };
        let len = buffer.len();
        let buffer = Box::into_raw(buffer) as *mut u16;
        // SAFETY: the buffer is owned by the Monitor and freed only after
        // profiling into it stopped.
        match unsafe { Block::register(text.start, text.end, buffer, len, nfunc) } {
            Ok((block, generation)) => Ok(Some(Monitor {
                buffer,
                len,
                block,
                generation,
                path,
            })),
            Err(e) => {
                // SAFETY: the box leaked above; profil never started on it
                // (register failed before or inside set, which then stored OFF).
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(buffer, len)) });
                Err(e)
            }
        }
    }

    /// The file [`Monitor::finish`] will write.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop profiling and write the mon.out file; returns its name.
    pub fn finish(self) -> Result<PathBuf, Error> {
        profil::stop_if_current(self.generation);
        // SAFETY: the buffer is still owned (Drop frees it) and no longer profiled into.
        let m = unsafe { summarize(&[self.block]) };
        write_file(&self.path, &m.to_bytes()?)?;
        Ok(self.path.clone())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        profil::stop_if_current(self.generation);
        // SAFETY: the box leaked in `start`; profiling into it stopped.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.buffer, self.len)) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mon_out_replaces_a_planted_link_and_never_follows_it() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let mon_out = d.path().join("mon.out");
        std::os::unix::fs::symlink(&victim, &mon_out).unwrap();
        write_file(&mon_out, b"profile").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&mon_out).unwrap().is_file());
        assert_eq!(std::fs::read(&mon_out).unwrap(), b"profile");
        // No temporary left beside it.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
        // Errors keep perror's shape: the path, then the OS error alone.
        let e = write_file(Path::new("/nonexistent/mon.out"), b"x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/nonexistent/mon.out: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn scale_matches_spec_4_7() {
        assert_eq!(scale(0x9000 - 0x1000, 4096), 16384);
        assert_eq!(scale(0x9000 - 0x1000, 16384), 0xffff);
        assert_eq!(scale(0x9000 - 0x1000, 20000), 0xffff);
        // Odd text sizes round up to whole WORDs.
        assert_eq!(scale(3, 1), 32768);
    }

    #[test]
    fn header_words_in_lp64() {
        assert_eq!(header_words(0), 12);
        assert_eq!(header_words(600), 12 + 600 * 8);
    }

    #[test]
    fn profdir_rules() {
        let a = Some(OsStr::new("/usr/bin/prog"));
        assert_eq!(output_path(None, 7, a), Some(PathBuf::from("mon.out")));
        assert_eq!(output_path(Some(OsStr::new("")), 7, a), None);
        assert_eq!(
            output_path(Some(OsStr::new("/tmp/p")), 123456, a),
            Some(PathBuf::from("/tmp/p/123456.prog"))
        );
        assert_eq!(
            output_path(Some(OsStr::new("d")), 9, Some(OsStr::new("prog"))),
            Some(PathBuf::from("d/9.prog"))
        );
        assert_eq!(
            output_path(Some(OsStr::new("d")), 9, None),
            Some(PathBuf::from("d/9.mon.out"))
        );
    }
}
