//! Entry point of the `perf_ring` fuzz target in `fuzz/` (cargo fuzz),
//! shared with the replay test that runs the committed corpus under
//! `cargo test`: a hostile ring of perf records, cut into records and
//! decoded exactly as the live reader does ([`crate::ring::for_each_record`]
//! then [`crate::decode::decode_record`]).

use crate::decode::{decode_record, RecordLayout};
use crate::ring::for_each_record;
use profdev_core::{Record, SessionConfig};

/// Bytes before the ring's data.
pub const PERF_RING_HEADER: usize = 14;

/// `fuzz_targets/perf_ring.rs`. The input is:
///
/// * byte 0, the session: bit 0 callchains, bit 1 user registers and
///   stack copies, bit 2 no `sample_id` trailer on non-sample records;
/// * byte 1, the ring size: 2^(3 + low 4 bits) bytes (8 B to 256 KiB);
/// * bytes 2..10, the tail counter (u64 LE), bytes 10..14 how far the head
///   is ahead of it (u32 LE);
/// * then the ring's data area, zero-padded or cut to the ring size.
///
/// The ring reader hands over only whole records of the size their header
/// says, consumes exactly `[tail, head)` when it succeeds, and the decoder
/// returns a value or an error for each, never more stack bytes than the
/// record holds.
pub fn perf_ring(data: &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<PERF_RING_HEADER>() else {
        return;
    };
    let flags = head[0];
    let config = SessionConfig {
        callchain: flags & 1 != 0,
        user_stack_bytes: if flags & 2 != 0 { 4096 } else { 0 },
        track_tasks: true,
        ..SessionConfig::system(1000)
    };
    let mut layout = RecordLayout::for_config(&config);
    if flags & 4 != 0 {
        layout.sample_id_all = false;
    }
    let size = 1usize << (3 + (head[1] & 0xf));
    let tail = u64::from_le_bytes(head[2..10].try_into().expect("8 bytes"));
    let ahead = u32::from_le_bytes(head[10..14].try_into().expect("4 bytes"));
    let mut ring = vec![0u8; size];
    let n = rest.len().min(size);
    ring[..n].copy_from_slice(&rest[..n]);

    let mut scratch = Vec::new();
    let mut consumed = 0u64;
    let result = for_each_record(
        &ring,
        tail,
        tail.wrapping_add(u64::from(ahead)),
        &mut scratch,
        |rec| {
            assert!(rec.len() >= 8);
            assert_eq!(usize::from(u16::from_ne_bytes([rec[6], rec[7]])), rec.len());
            consumed += rec.len() as u64;
            if let Ok(Some(Record::Sample(s))) = decode_record(rec, &layout, 0) {
                assert!(s.user_stack.len() < rec.len());
                assert!(s.kernel_chain.len() + s.user_chain.len() <= rec.len() / 8);
            }
        },
    );
    if let Ok(new_tail) = result {
        assert_eq!(new_tail, tail.wrapping_add(u64::from(ahead)));
        assert_eq!(consumed, u64::from(ahead));
    }
}
