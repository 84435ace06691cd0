//! Entry points of the fuzz targets in `fuzz/` (cargo fuzz), shared with the
//! replay test that runs the committed corpus under `cargo test`, so the two
//! cannot drift. Each takes arbitrary bytes and must neither panic nor
//! allocate beyond what the input's own length justifies; where a parse
//! succeeds, it checks what the format promises (a round trip).

use crate::gmon::{self, AddrWidth, ByteOrder, Target};
use crate::{kpdata, mon_out, prflog, prof_histogram};

/// `fuzz_targets/kpdata.rs`: a kpdata file.
/// The header alone (what kprof reads before any bucket) decides as the
/// whole file does.
pub fn kpdata(data: &[u8]) {
    let whole = kpdata::Kpdata::parse(data);
    let prefix = &data[..data.len().min(kpdata::HEADER_LEN)];
    let header = kpdata::Header::parse(prefix, data.len() as u64);
    assert_eq!(
        header,
        whole
            .as_ref()
            .map(kpdata::Kpdata::header)
            .map_err(Clone::clone)
    );
    if let Ok(k) = whole {
        let _ = (
            k.total(),
            k.outside(),
            k.bucket_size(),
            k.microseconds_per_tick(),
        );
    }
}

/// `fuzz_targets/gmon.rs`: a gmon.out in any layout, read as x86_64 and
/// as big-endian 32-bit.
pub fn gmon(data: &[u8]) {
    let be32 = Target {
        order: ByteOrder::Big,
        addr_width: AddrWidth::W32,
    };
    for target in [Target::X86_64, be32] {
        if let Ok(d) = gmon::parse(data, target) {
            // What parses must encode again in its own layout.
            let _ = gmon::write(&d.gmon, d.format, target);
        }
    }
}

/// `fuzz_targets/prflog.rs`: a prf log (either layout). A log that parses
/// encodes back to the bytes it was read from, less any partial record.
pub fn prflog(data: &[u8]) {
    let Ok(log) = prflog::parse(data) else {
        return;
    };
    let mut again = log.header.encode().expect("a header that parsed encodes");
    for r in &log.records {
        again.extend(
            log.header
                .encode_record(r)
                .expect("a record that parsed encodes"),
        );
    }
    let whole = log.partial.map_or(data.len(), |p| p.offset as usize);
    assert_eq!(again, data[..whole], "prf log round trip");
    let back = prflog::parse(&again).expect("a re-encoded log parses");
    assert_eq!((back.header, back.records), (log.header, log.records));
    assert!(back.partial.is_none());
}

/// `fuzz_targets/prof_histogram.rs`: prof histogram text, as one read's
/// pair and as a whole `cat`. What parses prints back and parses the same.
pub fn prof_histogram(data: &[u8]) {
    if let Ok((pc, count)) = prof_histogram::parse_pair(data) {
        let text = prof_histogram::encode_pair(pc, count);
        assert_eq!(prof_histogram::parse_pair(text.as_bytes()), Ok((pc, count)));
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(pairs) = prof_histogram::parse_text(text) {
        assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0), "pcs increase");
        assert!(pairs.iter().all(|&(_, c)| c > 0), "counts are positive");
        let again: String = pairs
            .iter()
            .map(|&(pc, c)| prof_histogram::encode_pair(pc, c))
            .collect();
        assert_eq!(prof_histogram::parse_text(&again), Ok(pairs));
    }
}

/// `fuzz_targets/mon_out.rs`: a monitor(3C) mon.out. What parses writes
/// back to the same length (padding aside, the same bytes) and parses the
/// same.
pub fn mon_out(data: &[u8]) {
    if let Ok(m) = mon_out::MonOut::parse(data) {
        let again = m.to_bytes().expect("a mon.out that parsed encodes");
        assert_eq!(again.len(), data.len(), "mon.out round trip length");
        assert_eq!(mon_out::MonOut::parse(&again).as_ref(), Ok(&m));
    }
}

/// `fuzz_targets/recording.rs`: a profdev recording (or a torn
/// `.partial`). What reads keeps the format's promises: object ids are
/// their positions, every sample names a Task entry of its thread and
/// objects that exist, and its stack lies within the frames.
pub fn recording(data: &[u8]) {
    use crate::recording;
    let Ok(r) = recording::read(data) else {
        return;
    };
    for (i, o) in r.objects.iter().enumerate() {
        assert_eq!(o.id as usize, i + 1, "object ids are positions");
        assert!(o.functions.windows(2).all(|w| w[0].start <= w[1].start));
    }
    for s in &r.samples {
        let t = r.task(s);
        assert_eq!(
            (t.pid, t.tid),
            (s.pid, s.tid),
            "a sample's task is its thread"
        );
        assert_eq!(
            r.stacks[s.stack as usize],
            (s.first, s.depth),
            "a sample's frames are its stack's"
        );
        for f in r.stack(s) {
            assert!(f.object == 0 || r.object(f.object).is_some());
        }
    }
    // Every export of what reads either writes or refuses in a sentence.
    #[cfg(feature = "export")]
    {
        use crate::export::{self, gmon};
        let _ = export::folded::write(&r);
        let _ = export::svg::write(&r, &export::svg::Options::default());
        let _ = export::pprof::encode(&r);
        let _ = export::firefox::write(&r);
        let _ = export::otlp::write(&r);
        let _ = export::perf_script::write(&r);
        let _ = export::proc_profile::write(&r, 0);
        let _ = export::kpdata::write(&r, 0);
        let _ = gmon::write(&r, &gmon::Select::default());
    }
    if let Some(t) = r.torn {
        // The whole records before the tear read the same.
        let before = recording::read(&data[..t as usize]).expect("the part before a tear reads");
        assert_eq!(before.samples, r.samples);
        assert!(before.torn.is_none());
    }
}

/// `fuzz_targets/heap_profile.rs`: a file given to `profdev export -i`
/// that is no recording, read as an allocation profile (raw or gzipped
/// profile.proto). Whatever reads draws: the flame graph's bytes are the
/// stacks' (each stack's bytes counted once, saturating), and the folded
/// lines add up to no more.
#[cfg(feature = "export")]
pub fn heap_profile(data: &[u8]) {
    use crate::export::heap::{self, Space};
    let Ok(Some(stacks)) = heap::read(data) else {
        return;
    };
    let want = stacks
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.alloc_space))
        .min(heap::MAX_BYTES);
    let m = heap::make(&stacks, "svg", Space::Alloc, None, false).expect("svg");
    let crate::export::Written::Alloc { bytes, .. } = m.what else {
        panic!("an allocation graph says what it drew");
    };
    assert_eq!(bytes, want, "the graph's bytes are the stacks'");
    let folded = heap::make(&stacks, "folded", Space::Inuse, None, true).expect("folded");
    assert!(std::str::from_utf8(&folded.bytes).is_ok());
}
