//! An allocation profile as an allocation flame graph: the stacks of a
//! heap profile ([`crate::pprof::decode::heap_stacks`]: `profdev mprof
//! --pprof`'s file, or `go tool pprof`'s heap profiles) drawn as
//! [`super::svg`] draws a recording, each frame's width its share of the
//! bytes allocated there and below ([`Space::Alloc`], the default) or
//! still live at the end ([`Space::Inuse`]); its title says the bytes.
//! Folded lines of the same bytes are [`crate::pprof::heap::folded`]'s.
//!
//! The stacks become a recording in memory ([`recording`]): one object per
//! module, one function per name in it, one sample per stack weighing
//! its bytes, viewed as weights ([`SampleType::Wall`]), so the graph is
//! the one every recording gets (zoom, search, `--inverted`).

use super::request::Made;
use super::{svg, ExportError, Written};
use crate::pprof::decode::{heap_stacks, DecodeError, MAX_PROFILE};
use crate::pprof::heap::{folded, HeapStack};
use crate::recording::{
    self, Encoder, Frame, Function, Header, ObjectInfo, ObjectKind, Recording, SampleInfo,
    SampleType, Task,
};
use std::collections::HashMap;
use std::io::Read as _;

/// Which bytes a graph weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Space {
    /// Bytes allocated (`alloc_space`).
    #[default]
    Alloc,
    /// Bytes live at the end (`inuse_space`).
    Inuse,
}

impl Space {
    /// `alloc` or `inuse`, as `--type` names them.
    pub fn parse(s: &str) -> Option<Space> {
        match s {
            "alloc" => Some(Space::Alloc),
            "inuse" => Some(Space::Inuse),
            _ => None,
        }
    }

    /// `profdev export --type` of an allocation profile: `alloc` or
    /// `inuse`, and `cpu` (the option's default) for `alloc`.
    ///
    /// # Errors
    ///
    /// `off-cpu` or `wall`, which only a recording has.
    pub fn of_type(ty: &str) -> Result<Space, ExportError> {
        match ty {
            "cpu" => Ok(Space::Alloc),
            t => Space::parse(t).ok_or_else(|| ExportError::HeapType(t.to_string())),
        }
    }

    fn of(self, s: &HeapStack) -> u64 {
        match self {
            Space::Alloc => s.alloc_space,
            Space::Inuse => s.inuse_space,
        }
    }
}

/// The stacks of the allocation profile `file` holds (at most
/// [`MAX_PROFILE`] bytes of it are read); `None` when it is a recording
/// (`profdev record`'s: its first 8 bytes say so, and nothing more is
/// read) or no pprof profile at all (the recording reader then says what
/// it is not).
///
/// # Errors
///
/// A pprof profile that is no heap profile (a CPU profile), one too large,
/// or a read that fails.
pub fn read(file: impl std::io::Read) -> Result<Option<Vec<HeapStack>>, DecodeError> {
    let mut file = file.take(MAX_PROFILE + 1);
    let mut bytes = Vec::new();
    let failed = |e: std::io::Error| DecodeError::Read(e.to_string());
    file.by_ref()
        .take(8)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.starts_with(&recording::MAGIC) {
        return Ok(None);
    }
    file.read_to_end(&mut bytes).map_err(failed)?;
    if bytes.len() as u64 > MAX_PROFILE {
        return Err(DecodeError::TooLarge);
    }
    match heap_stacks(&bytes) {
        Ok(s) => Ok(Some(s)),
        Err(DecodeError::NotPprof(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The most bytes a graph adds up (2^62): a profile that claims more
/// (no machine allocates that much; a hostile file may say so) is drawn
/// up to it, the stacks past it weighing less or nothing, so that no sum
/// of the graph overflows.
pub const MAX_BYTES: u64 = 1 << 62;

/// The stacks as a recording whose samples weigh their bytes (`space`),
/// viewed as weights. Stacks of 0 bytes are left out; the bytes add up
/// to at most [`MAX_BYTES`].
pub fn recording(stacks: &[HeapStack], space: Space) -> Recording {
    let mut enc = Encoder::new(&Header {
        flags: recording::FLAG_STACKS,
        start_ns: 0,
        period_ns: 0,
    });
    enc.task(&Task {
        pid: 1,
        tid: 1,
        generation: 0,
        time: 0,
        comm: "heap".into(),
    });
    // Each module an object, each name in it a function 16 bytes long.
    let mut objects: HashMap<&str, u32> = HashMap::new();
    let mut funcs: HashMap<(u32, &str), u64> = HashMap::new();
    let mut tables: Vec<Vec<Function>> = Vec::new();
    let mut samples: Vec<(u64, Vec<Frame>)> = Vec::new();
    let mut total = 0u64;
    for st in stacks.iter() {
        let bytes = space.of(st).min(MAX_BYTES - total);
        if bytes == 0 {
            continue;
        }
        total += bytes;
        let mut frames = Vec::with_capacity(st.frames.len());
        for f in &st.frames {
            let module = if f.module.is_empty() {
                "[unknown]"
            } else {
                f.module.as_str()
            };
            let object = *objects.entry(module).or_insert_with(|| {
                tables.push(Vec::new());
                enc.object(&ObjectInfo {
                    kind: ObjectKind::User,
                    path: module.to_string(),
                    ..ObjectInfo::default()
                })
            });
            let table = &mut tables[object as usize - 1];
            let offset = *funcs
                .entry((object, f.function.as_str()))
                .or_insert_with(|| {
                    let start = 16 * (table.len() as u64 + 1);
                    table.push(Function {
                        start,
                        len: 16,
                        name: f.function.clone(),
                        lines: Vec::new(),
                    });
                    start
                });
            frames.push(Frame { object, offset });
        }
        samples.push((bytes, frames));
    }
    for (i, table) in tables.iter().enumerate() {
        enc.symbols(i as u32 + 1, &[], table)
            .expect("its object was written");
    }
    for (weight, frames) in &samples {
        let info = SampleInfo {
            pid: 1,
            tid: 1,
            weight: *weight,
            ..SampleInfo::default()
        };
        // Frames beyond what a record holds are not drawn.
        let mut n = frames.len();
        while enc.sample(&info, &frames[..n]).is_err() && n > 1 {
            n /= 2;
        }
    }
    recording::read(&enc.take())
        .expect("a recording this encoder wrote reads")
        .view(SampleType::Wall)
}

/// `profdev export FORMAT` of a heap profile's `stacks`: `svg` (an
/// allocation flame graph titled `title`, default "Allocation Flame
/// Graph" or, of `inuse`, "In-Use Memory Flame Graph"; `inverted` an
/// icicle graph) or `folded` (the bytes per stack).
///
/// # Errors
///
/// Any other format: one sentence naming what reads a heap profile.
pub fn make(
    stacks: &[HeapStack],
    format: &str,
    space: Space,
    title: Option<String>,
    inverted: bool,
) -> Result<Made, ExportError> {
    match format {
        "folded" => Ok(Made {
            bytes: folded(stacks, space == Space::Inuse).into_bytes(),
            binary: false,
            kernel_addrs: false,
            what: Written::Other,
        }),
        "svg" => {
            let rec = recording(stacks, space);
            let title = title.unwrap_or_else(|| {
                match space {
                    Space::Alloc => "Allocation Flame Graph",
                    Space::Inuse => "In-Use Memory Flame Graph",
                }
                .into()
            });
            let g = svg::render(
                &rec,
                &svg::Options {
                    title,
                    inverted,
                    bytes: true,
                    ..svg::Options::default()
                },
            );
            Ok(Made {
                bytes: g.svg.into_bytes(),
                binary: false,
                kernel_addrs: false,
                what: Written::Alloc {
                    frames: g.frames,
                    stacks: rec.samples.len(),
                    bytes: rec.samples.iter().map(|s| s.weight).sum(),
                },
            })
        }
        other => Err(ExportError::HeapFormat(other.to_string())),
    }
}
