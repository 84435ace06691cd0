//! A module's record and the `histogram` file's protocol: one
//! `0x<pc> <count>\n` pair per read, from a snapshot taken at open.

use crate::pc_counts::PcCounts;
use crate::tree::Chan;
use crate::DevError;
use profdev_formats::prof_histogram::encode_pair;

/// One profiled module.
#[derive(Clone, Debug)]
pub(super) struct ModRecord {
    pub(super) id: u32,
    pub(super) name: String,
    pub(super) path: String,
    /// pc (file address) → count, never 0.
    pub(super) counts: PcCounts,
    /// The module's file as it was mapped (kept open by the objects
    /// table), served as `object`.
    pub(super) object: Option<std::sync::Arc<profdev_symbolize::Object>>,
    /// In memory mode, the pairs of the last report (index, bytes), which
    /// `histogram` serves instead of `counts`.
    pub(super) memory: Option<Vec<(u64, u64)>>,
}

/// One open `histogram`: the pairs at open and the next one to return.
pub(super) struct Cursor {
    pairs: Vec<(u64, u64)>,
    next: usize,
}

impl Cursor {
    /// The pairs of `r` as they are now.
    pub(super) fn of(r: &ModRecord) -> Self {
        Cursor {
            pairs: match &r.memory {
                Some(p) => p.iter().copied().filter(|&(_, v)| v != 0).collect(),
                None => r.counts.pairs(),
            },
            next: 0,
        }
    }

    /// The next pair, if `count` bytes hold it; nothing after the last.
    /// A read too small fails and keeps the pair for the next read.
    pub(super) fn read(chan: &mut Chan, count: u32) -> Result<Vec<u8>, DevError> {
        let Some(cursor) = chan.aux_mut::<Cursor>() else {
            return Err(DevError::Perm);
        };
        let Some(&(pc, n)) = cursor.pairs.get(cursor.next) else {
            return Ok(Vec::new());
        };
        let pair = encode_pair(pc, n);
        if (count as usize) < pair.len() {
            return Err(DevError::Invalid(format!(
                "read or write too small: the next pair needs {} bytes",
                pair.len()
            )));
        }
        cursor.next += 1;
        Ok(pair.into_bytes())
    }
}
