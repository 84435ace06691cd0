//! monstartup, moncontrol, _mcleanup: a GNU gmon.out flat profile from profil.
//!
//! # Synopsis
//!
//! ```no_run
//! # fn hot() {}
//! profdev_profil::gmon::start().unwrap();      // = monstartup(text of the main program)
//! hot();
//! let file = profdev_profil::gmon::mcleanup().unwrap();  // = _mcleanup(): writes ./gmon.out
//! // $ gprof -b ./prog gmon.out
//! # let _ = file;
//! ```
//!
//! # Description
//!
//! [`monstartup`]`(lowpc, highpc)` rounds `lowpc` down and `highpc` up to 4
//! bytes, allocates one zeroed `u16` bin per 4 bytes of text and calls
//! `moncontrol(1)`. [`moncontrol`]`(true)` starts profil(2) on the bins
//! with offset `lowpc` and scale 0x8000, which with the SVR4 formula puts
//! the PC `pc` in bin `(pc - lowpc) / 4` exactly; `moncontrol(false)` is
//! `profil(NULL, 0, 0, 0)` (it stops any profil). [`mcleanup`] stops
//! profiling, writes the GNU gmon.out (with `profdev_formats::gmon`, the
//! writer every profdev command uses; [`encode`]) and frees the bins; a later monstartup may start again. [`start`] is monstartup over
//! the main program's executable segments.
//!
//! The histogram record holds link-time addresses (the load bias of the
//! object containing `lowpc` subtracted, as glibc does for a PIE),
//! `hist_size` = number of bins, and the profil rate as `prof_rate`. gprof
//! then computes exactly 4 bytes per bin.
//!
//! Output file: `$GMON_OUT_PREFIX.<pid>` if that variable is set (ignored
//! in a set-user-ID program, `AT_SECURE`), else `gmon.out`, in the current
//! directory, mode 0666 before the umask. glibc opens that name
//! `O_CREAT|O_TRUNC|O_WRONLY|O_NOFOLLOW`; here it is written as profdev
//! writes every file (`profdev_safefile`): a unique temporary beside it,
//! renamed over it, so a symbolic link or a hard link planted at the name
//! is replaced, never written through, and a full disk leaves the old file
//! or none, never a partial one. A directory writable by other users and
//! not sticky is refused (the message goes to standard error).
//!
//! Differences from glibc: glibc sizes the histogram as
//! `roundup(textsize/2, sizeof(long))` bytes and scales by a float-derived
//! factor (32823 for its measured example), so its bins drift against
//! gprof's even spacing; here bins are exactly 4 bytes. No call arcs are
//! recorded (that needs `-pg` and an `mcount` that this library does not
//! provide), so gprof's call graph is empty and the flat profile has no
//! call counts.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Mutex;

use profdev_formats::gmon::{self, Format, GmonOut, Histogram, Target};

use crate::error::Error;
use crate::profil::{self, Config};
use crate::{clock, text};

/// Text bytes per histogram bin.
pub const BYTES_PER_BIN: usize = 4;
/// The profil scale that makes the SVR4 formula count 4 bytes per cell.
pub const SCALE: u32 = 0x8000;

/// monstartup's sizing of the histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// `lowpc` rounded down to 4 bytes.
    pub lowpc: usize,
    /// `highpc` rounded up to 4 bytes.
    pub highpc: usize,
    /// Number of u16 bins, `(highpc - lowpc) / 4`.
    pub bins: usize,
}

impl Sizing {
    /// Round the range and count the bins.
    pub fn new(lowpc: usize, highpc: usize) -> Result<Sizing, Error> {
        let low = lowpc & !(BYTES_PER_BIN - 1);
        let high = highpc
            .checked_add(BYTES_PER_BIN - 1)
            .map(|h| h & !(BYTES_PER_BIN - 1))
            .unwrap_or(usize::MAX & !(BYTES_PER_BIN - 1));
        if high <= low {
            return Err(Error::EmptyTextRange {
                call: "monstartup",
                lowpc,
                highpc,
            });
        }
        let bins = (high - low) / BYTES_PER_BIN;
        if u32::try_from(bins).is_err() {
            return Err(Error::TooManyBins { bins });
        }
        Ok(Sizing {
            lowpc: low,
            highpc: high,
            bins,
        })
    }

    /// `highpc - lowpc`.
    pub fn textsize(&self) -> usize {
        self.highpc - self.lowpc
    }
}

/// The ABI of the programs this library is linked into.
const TARGET: Target = if cfg!(target_arch = "aarch64") {
    Target::AARCH64
} else {
    Target::X86_64
};

/// The GNU gmon.out of a monstartup histogram: `bins` counted over
/// `sizing`'s run-time range, written at link-time addresses (`bias`, the
/// load bias of the object holding `lowpc`, subtracted) with `prof_rate`
/// Hz and no arcs.
pub fn encode(
    sizing: &Sizing,
    bias: usize,
    prof_rate: u32,
    bins: Vec<u16>,
) -> Result<Vec<u8>, Error> {
    let mut hist = Histogram::new(
        sizing.lowpc.wrapping_sub(bias) as u64,
        sizing.highpc.wrapping_sub(bias) as u64,
        0,
        prof_rate,
    );
    hist.bins = bins;
    let profile = GmonOut {
        histograms: vec![hist],
        ..GmonOut::default()
    };
    Ok(gmon::write(&profile, Format::Gnu, TARGET)?)
}

/// The gmon.out file name: `$GMON_OUT_PREFIX.<pid>` unless `secure`, else `gmon.out`.
pub fn output_path(prefix: Option<&OsStr>, secure: bool, pid: u32) -> PathBuf {
    match prefix {
        Some(p) if !secure => {
            let mut s = p.to_os_string();
            s.push(format!(".{pid}"));
            PathBuf::from(s)
        }
        _ => PathBuf::from("gmon.out"),
    }
}

struct State {
    sizing: Sizing,
    bias: usize,
    /// The leaked bins: written by profil ticks, so never behind a `&mut`.
    bins: *mut u16,
}

// SAFETY: `bins` is an owned allocation only touched under the mutex or by
// profil ticks.
unsafe impl Send for State {}

static GMON: Mutex<Option<State>> = Mutex::new(None);

fn lock() -> std::sync::MutexGuard<'static, Option<State>> {
    GMON.lock().unwrap_or_else(|e| e.into_inner())
}

/// monstartup(3): allocate a histogram for `lowpc..highpc` (run-time
/// addresses) and start profiling into it.
pub fn monstartup(lowpc: usize, highpc: usize) -> Result<(), Error> {
    let mut g = lock();
    if g.is_some() {
        return Err(Error::AlreadyStarted);
    }
    let sizing = Sizing::new(lowpc, highpc)?;
    let mut v: Vec<u16> = Vec::new();
    v.try_reserve_exact(sizing.bins)
        .map_err(|_| Error::OutOfMemory { bins: sizing.bins })?;
    v.resize(sizing.bins, 0);
    let bins = Box::into_raw(v.into_boxed_slice()) as *mut u16;
    let bias = text::bias_of(sizing.lowpc).unwrap_or(0);
    *g = Some(State { sizing, bias, bins });
    control(g.as_ref().expect("just set"), true)
}

/// Whether monstartup was called and _mcleanup not yet.
pub fn is_started() -> bool {
    lock().is_some()
}

/// monstartup over the main program's executable segments.
pub fn start() -> Result<(), Error> {
    let t = text::main_program().ok_or(Error::NoText)?;
    monstartup(t.low, t.high)
}

fn control(st: &State, on: bool) -> Result<(), Error> {
    let cfg = if on {
        Config {
            buf: st.bins as usize,
            bufsiz: st.sizing.bins * 2,
            offset: st.sizing.lowpc,
            scale: SCALE,
        }
    } else {
        Config::OFF
    };
    // SAFETY: the bins stay allocated until mcleanup, which turns profiling
    // off first.
    unsafe { profil::set(cfg) }.map(|_| ())
}

/// moncontrol(3): `true` resumes profiling into the monstartup histogram,
/// `false` is `profil(NULL, 0, 0, 0)`.
pub fn moncontrol(on: bool) -> Result<(), Error> {
    let g = lock();
    match g.as_ref() {
        Some(st) => control(st, on),
        None if !on => control_off(),
        None => Err(Error::NotStarted),
    }
}

fn control_off() -> Result<(), Error> {
    // SAFETY: turning profiling off has no buffer.
    unsafe { profil::set(Config::OFF) }.map(|_| ())
}

/// _mcleanup(3): stop profiling, write gmon.out, free the histogram.
/// Returns the file written.
pub fn mcleanup() -> Result<PathBuf, Error> {
    let mut g = lock();
    let st = g.take().ok_or(Error::NotStarted)?;
    // Turning profiling off sets up nothing and does not fail in practice;
    // if it did, the bins would be leaked, never freed while counted into.
    control_off()?;
    // SAFETY: profiling is off and `set` waited for in-flight ticks, so
    // nobody writes the bins any more; this is the box leaked in monstartup.
    let bins =
        unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(st.bins, st.sizing.bins)) };
    let bytes = encode(&st.sizing, st.bias, clock::rate_hz(), bins.into_vec())?;
    // SAFETY: getauxval is always safe to call.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    let prefix = std::env::var_os("GMON_OUT_PREFIX");
    let path = output_path(prefix.as_deref(), secure, std::process::id());
    profdev_safefile::write_file(&path, &bytes, 0o666).map_err(|e| Error::Write {
        path: path.clone(),
        source: e.into_os_error(),
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing_rounds_to_whole_bins() {
        // Spec §4.7's monstartup example range; glibc makes 1188 bins of
        // 3.99 bytes, we make 1186 of exactly 4.
        let s = Sizing::new(0x400000, 0x401285).unwrap();
        assert_eq!(
            s,
            Sizing {
                lowpc: 0x400000,
                highpc: 0x401288,
                bins: 1186
            }
        );
        assert_eq!(s.textsize(), 4744);
        assert_eq!(
            Sizing::new(0x1003, 0x1004).unwrap(),
            Sizing {
                lowpc: 0x1000,
                highpc: 0x1004,
                bins: 1
            }
        );
        assert!(matches!(
            Sizing::new(0x1000, 0x1000),
            Err(Error::EmptyTextRange { .. })
        ));
        assert!(matches!(
            Sizing::new(0x2000, 0x1000),
            Err(Error::EmptyTextRange { .. })
        ));
    }

    #[test]
    fn scale_0x8000_is_exactly_four_bytes_per_bin() {
        use crate::index::{svr4, Tick};
        for d in 0..4096usize {
            assert_eq!(svr4(0x1000 + d, 0x1000, SCALE, 1 << 20), Tick::Cell(d / 4));
        }
    }

    #[test]
    fn encode_writes_link_time_addresses_and_four_byte_bins() {
        let s = Sizing::new(0x5555_5555_5000, 0x5555_5555_5010).unwrap();
        let bins = vec![1, 0, 7, 0xffff];
        let bytes = encode(&s, 0x5555_5555_4000, 100, bins.clone()).unwrap();
        let back = gmon::parse(&bytes, TARGET).unwrap();
        assert_eq!(back.format, Format::Gnu);
        assert_eq!(back.gnu_version, Some(1));
        let mut want = Histogram::new(0x1000, 0x1010, 0, 100);
        want.bins = bins;
        assert_eq!(back.gmon.histograms, vec![want]);
        assert!(back.gmon.arcs.is_empty() && back.gmon.bb_counts.is_empty());
        // gprof's bin width: (high_pc - low_pc) / hist_size = 4 bytes.
        assert_eq!(back.gmon.histograms[0].bin_of(0x100b), Some(2));
        // The GNU header, one histogram record, 2 bytes per bin.
        assert_eq!(bytes.len(), 20 + 1 + 8 + 8 + 4 + 4 + 15 + 1 + 2 * 4);
    }

    #[test]
    fn output_path_follows_gmon_out_prefix() {
        assert_eq!(output_path(None, false, 42), PathBuf::from("gmon.out"));
        assert_eq!(
            output_path(Some(OsStr::new("/tmp/x")), false, 42),
            PathBuf::from("/tmp/x.42")
        );
        assert_eq!(
            output_path(Some(OsStr::new("/tmp/x")), true, 42),
            PathBuf::from("gmon.out")
        );
    }
}
