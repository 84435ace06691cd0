//! Exports of `off-cpu` and `wall` views (`--type`): pprof's sample types
//! and `state` labels decoded with prost, OTLP's sample type, the flame
//! graph's units and widths, label counts in ns, and `cpu` views as before.

use opentelemetry_proto::tonic::profiles::v1development::ProfilesData;
use profdev_formats::export::{folded, otlp, pprof, svg, Names};
use profdev_formats::pprof::Profile;
use profdev_formats::recording::{
    self, Encoder, Frame, Function, Header, ObjectInfo, ObjectKind, OffCpu, Recording, SampleInfo,
    SampleType, Task,
};
use prost::Message;

/// main;burner on the CPU 1 ms (one sample), main;napper 2 ms asleep and
/// 1 ms in I/O, [unknown] 0.5 ms other.
fn recording() -> Recording {
    let mut e = Encoder::new(&Header {
        flags: 1,
        start_ns: 0,
        period_ns: 1_000_000,
    });
    e.task(&Task {
        pid: 3,
        tid: 3,
        generation: 0,
        time: 0,
        comm: "p".into(),
    });
    let id = e.object(&ObjectInfo {
        kind: ObjectKind::User,
        path: "/bin/p".into(),
        ..ObjectInfo::default()
    });
    let f = |name: &str, start| Function {
        start,
        len: 0x100,
        name: name.into(),
        lines: Vec::new(),
    };
    e.symbols(
        id,
        &[],
        &[f("main", 0x100), f("burner", 0x200), f("napper", 0x300)],
    )
    .unwrap();
    let at = |o| Frame {
        object: id,
        offset: o,
    };
    let samples: [(u64, u64, Option<OffCpu>); 4] = [
        (0x210, 1_000_000, None),
        (0x310, 2_000_000, Some(OffCpu::Sleep)),
        (0x310, 1_000_000, Some(OffCpu::Io)),
        (0x910, 500_000, Some(OffCpu::Other)),
    ];
    for (i, (off, weight, off_cpu)) in samples.into_iter().enumerate() {
        let s = SampleInfo {
            time: i as u64 * 10,
            cpu: 0,
            pid: 3,
            tid: 3,
            weight,
            kernel: false,
            off_cpu,
        };
        e.sample(&s, &[at(off), at(0x110)]).unwrap();
    }
    recording::read(&e.take()).unwrap()
}

fn decode(rec: &Recording) -> Profile {
    Profile::decode(&pprof::encode(rec)[..]).unwrap()
}

fn types(p: &Profile) -> Vec<(String, String)> {
    let s = |i: i64| p.string_table[i as usize].clone();
    p.sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect()
}

/// (state label, values) of each sample.
fn samples(p: &Profile) -> Vec<(String, Vec<i64>)> {
    let s = |i: i64| p.string_table[i as usize].clone();
    let mut v: Vec<(String, Vec<i64>)> = p
        .sample
        .iter()
        .map(|x| {
            let state = x
                .label
                .iter()
                .find(|l| s(l.key) == "state")
                .map_or(String::new(), |l| s(l.str));
            (state, x.value.clone())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn pprof_has_off_cpu_and_wall_sample_types_and_state_labels() {
    let rec = recording();
    let cpu = decode(&rec.clone().view(SampleType::Cpu));
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        types(&cpu),
        [pair("samples", "count"), pair("cpu", "nanoseconds")]
    );
    assert_eq!(cpu.sample.len(), 1);

    let off = decode(&rec.clone().view(SampleType::OffCpu));
    assert_eq!(
        types(&off),
        [pair("samples", "count"), pair("off_cpu", "nanoseconds")]
    );
    // napper's two states are two samples of one stack; the preempted
    // interval (other) is wall time, not time waiting.
    assert_eq!(
        samples(&off),
        [
            ("io".to_string(), vec![1, 1_000_000]),
            ("sleep".to_string(), vec![1, 2_000_000]),
        ]
    );
    assert_eq!(off.default_sample_type, 0);

    let wall = decode(&rec.clone().view(SampleType::Wall));
    assert_eq!(
        types(&wall),
        [
            pair("samples", "count"),
            pair("cpu", "nanoseconds"),
            pair("off_cpu", "nanoseconds"),
            pair("wall", "nanoseconds"),
        ]
    );
    assert_eq!(wall.string_table[wall.default_sample_type as usize], "wall");
    assert_eq!(
        samples(&wall),
        [
            (String::new(), vec![1, 1_000_000, 0, 1_000_000]),
            ("io".to_string(), vec![1, 0, 1_000_000, 1_000_000]),
            ("other".to_string(), vec![1, 0, 500_000, 500_000]),
            ("sleep".to_string(), vec![1, 0, 2_000_000, 2_000_000]),
        ]
    );
}

#[test]
fn otlp_names_the_view_as_its_sample_type() {
    let rec = recording();
    for (ty, name) in [
        (SampleType::Cpu, "cpu"),
        (SampleType::OffCpu, "off_cpu"),
        (SampleType::Wall, "wall"),
    ] {
        let data = ProfilesData::decode(&otlp::write(&rec.clone().view(ty))[..]).unwrap();
        let d = data.dictionary.as_ref().unwrap();
        let p = &data.resource_profiles[0].scope_profiles[0].profiles[0];
        let st = p.sample_type.as_ref().unwrap();
        assert_eq!(d.string_table[st.type_strindex as usize], name);
        let total: i64 = p.samples.iter().flat_map(|s| s.values.iter()).sum();
        let want = match ty {
            SampleType::Cpu => 1_000_000,
            SampleType::OffCpu => 3_000_000,
            SampleType::Wall => 4_500_000,
        };
        assert_eq!(total, want, "{name}");
    }
}

#[test]
fn flame_graph_widths_and_labels_weigh_time() {
    let rec = recording().view(SampleType::Wall);
    let g = svg::render(&rec, &svg::Options::default());
    // 4.5 ms of which napper 3 ms: two thirds of the width.
    assert!(
        g.svg.contains("<title>napper (3000 µs, 66.67%)</title>"),
        "{}",
        g.svg
    );
    assert!(
        g.svg.contains("<title>main (4500 µs, 100.00%)</title>"),
        "{}",
        g.svg
    );
    assert!(g.svg.contains(">4500 µs</text>"), "{}", g.svg);
    assert!(g.svg.contains(" ns of time)\""), "the search counts ns");
    let drawn = g.svg.split("<script").next().unwrap();
    assert!(drawn.split("<title>").skip(1).all(|t| !t
        .split("</title>")
        .next()
        .unwrap()
        .contains("samples")));
    assert_eq!(g.samples, 4);
    let cpu = svg::render(&recording().view(SampleType::Cpu), &svg::Options::default());
    assert!(
        cpu.svg
            .contains("<title>burner (1 samples, 100.00%)</title>"),
        "{}",
        cpu.svg
    );
    // Label counts are ns of a time view.
    let names = Names::new(&rec);
    assert_eq!(names.label_counts(), [("[unknown] in p", 500_000)]);
    assert_eq!(
        folded::write(&rec),
        "main;[unknown] in p 500\nmain;burner 1000\nmain;napper 3000\n"
    );
}

#[test]
fn a_differential_graph_of_time_judges_shares_of_time() {
    let rec = recording().view(SampleType::OffCpu);
    let seen = std::cell::RefCell::new(Vec::new());
    let judge = |c: &[svg::PathCounts]| {
        seen.borrow_mut().extend_from_slice(c);
        c.iter()
            .map(|_| svg::Shift {
                delta: 0.0,
                significant: false,
            })
            .collect()
    };
    svg::render_diff(&rec, &rec, &svg::Options::default(), &judge);
    // Weights 2, 1, 0.5 ms: Kish's n_eff = 3.5² / 5.25 = 2.33, so totals
    // of 2 effective samples (rounded), not 3.5 million ns.
    let c = seen.borrow();
    assert!(c.iter().all(|c| c[1] == 2 && c[3] == 2), "{c:?}");
}
