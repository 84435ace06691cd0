//! The labels (`[idle]`, `[unwind failed: REASON]`, `[anon]`, `[unknown] in
//! OBJECT`, `[unknown]`, `sub_ADDR`) read the same in every export, and the
//! otlp export decodes with the types of the opentelemetry-proto release it
//! is pinned to (the `opentelemetry-proto` crate 0.33.1, proto v1.10.0).

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::profiles::v1development::ProfilesData;
use profdev_formats::export::{firefox, folded, otlp, perf_script, pprof, svg, Names, IDLE};
use profdev_formats::recording::{
    self, unwind_failed_label, Encoder, Frame, Function, Header, Line, ObjectInfo, ObjectKind,
    Recording, SampleInfo, Task, FLAG_STACKS,
};
use prost::Message;
use std::collections::BTreeMap;

const START: u64 = 1_700_000_000_000_000_000;
const REASON: &str = "no caller found from prog";

fn f(name: &str, start: u64, line: u32) -> Function {
    Function {
        start,
        len: 0x80,
        name: name.into(),
        lines: vec![Line {
            addr: start,
            file: 0,
            line,
        }],
    }
}

/// 10 × main;a;b;c (tids 100 and 101), 3 × b;c cut short by an unwind
/// failure, 2 × the idle task in do_idle, 1 × main;[anon], 1 × main;[unknown]
/// in prog, 1 × main;sub_1500, 1 × a raw [unknown] address.
fn recording() -> Recording {
    let mut e = Encoder::new(&Header {
        flags: FLAG_STACKS,
        start_ns: START,
        period_ns: 1_000_000,
    });
    for (pid, tid, comm) in [
        (100, 100, "prog"),
        (100, 101, "worker"),
        (0, 0, "swapper/0"),
    ] {
        e.task(&Task {
            pid,
            tid,
            generation: 0,
            time: 0,
            comm: comm.into(),
        });
    }
    let prog = e.object(&ObjectInfo {
        kind: ObjectKind::User,
        dev: 1,
        inode: 2,
        build_id: vec![0xab, 0xcd],
        path: "/opt/t/prog".into(),
    });
    let kernel = e.object(&ObjectInfo {
        kind: ObjectKind::Kernel,
        path: "[kernel.kallsyms]".into(),
        ..ObjectInfo::default()
    });
    let anon = e.object(&ObjectInfo {
        kind: ObjectKind::Anon,
        path: "[anon]".into(),
        ..ObjectInfo::default()
    });
    let label = e.object(&ObjectInfo {
        kind: ObjectKind::Label,
        path: unwind_failed_label(REASON),
        ..ObjectInfo::default()
    });
    e.symbols(
        prog,
        &["prog.c".into()],
        &[
            f("main", 0x1100, 20),
            f("a", 0x1200, 10),
            f("b", 0x1300, 12),
            f("c", 0x1400, 14),
            f("sub_1500", 0x1500, 16),
        ],
    )
    .unwrap();
    e.symbols(
        kernel,
        &[],
        &[Function {
            start: 0xffff_ffff_8100_0000,
            len: 0x100,
            name: "do_idle".into(),
            lines: vec![],
        }],
    )
    .unwrap();
    let u = |o| Frame {
        object: prog,
        offset: o,
    };
    let mut t = 0u64;
    let mut sample = |e: &mut Encoder, pid: u32, tid: u32, kernel: bool, frames: &[Frame]| {
        t += 1_000_000;
        e.sample(
            &SampleInfo {
                time: t,
                cpu: 0,
                pid,
                tid,
                weight: 1_000_000,
                kernel,
                off_cpu: None,
            },
            frames,
        )
        .unwrap();
    };
    for i in 0..10 {
        let tid = 100 + i % 2;
        let st = [u(0x1404), u(0x1312), u(0x1212), u(0x1122)];
        sample(&mut e, 100, tid, false, &st);
    }
    for _ in 0..3 {
        let st = [
            u(0x1404),
            u(0x1312),
            Frame {
                object: label,
                offset: 0,
            },
        ];
        sample(&mut e, 100, 100, false, &st);
    }
    for _ in 0..2 {
        let st = [Frame {
            object: kernel,
            offset: 0xffff_ffff_8100_0010,
        }];
        sample(&mut e, 0, 0, true, &st);
    }
    let an = Frame {
        object: anon,
        offset: 0x7f00_0000_0010,
    };
    sample(&mut e, 100, 100, false, &[an, u(0x1142)]);
    sample(&mut e, 100, 100, false, &[u(0x3000), u(0x1142)]);
    sample(&mut e, 100, 100, false, &[u(0x1510), u(0x1142)]);
    let raw = Frame {
        object: 0,
        offset: 0x1234,
    };
    sample(&mut e, 100, 101, false, &[raw]);
    e.end();
    recording::read(&e.take()).unwrap()
}

const FAILED: &str = "[unwind failed: no caller found from prog]";
const LABELS: [&str; 6] = [
    IDLE,
    FAILED,
    "[anon]",
    "[unknown] in prog",
    "[unknown]",
    "sub_1500",
];

#[test]
fn label_counts() {
    let rec = recording();
    let names = Names::new(&rec);
    let counts: BTreeMap<&str, u64> = names.label_counts().into_iter().collect();
    let want: BTreeMap<&str, u64> = [
        (IDLE, 2),
        (FAILED, 3),
        ("[anon]", 1),
        ("[unknown] in prog", 1),
        ("[unknown]", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(counts, want);
}

#[test]
fn every_export_names_the_labels_alike() {
    let rec = recording();
    let fold = folded::write(&rec);
    for line in [
        "main;a;b;c 10\n",
        &format!("{FAILED};b;c 3\n"),
        "[idle];do_idle 2\n",
        "main;[anon] 1\n",
        "main;[unknown] in prog 1\n",
        "main;sub_1500 1\n",
        "[unknown] 1\n",
    ] {
        assert!(fold.contains(line), "{line:?} in\n{fold}");
    }
    let flame = svg::write(&rec, &svg::Options::default());
    let json = String::from_utf8(firefox::write(&rec)).unwrap();
    let script = perf_script::write(&rec);
    let mut pb = Vec::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(&pprof::write(&rec)[..])
        .read_to_end(&mut pb)
        .unwrap();
    let pb = String::from_utf8_lossy(&pb).into_owned();
    let otlp_strings = ProfilesData::decode(&otlp::write(&rec)[..])
        .unwrap()
        .dictionary
        .unwrap()
        .string_table;
    for label in LABELS {
        let escaped = svg::escape(label);
        assert!(
            flame.contains(&format!("<title>{escaped} (")),
            "svg: {label}"
        );
        assert!(json.contains(&format!("\"{label}\"")), "firefox: {label}");
        assert!(pb.contains(label), "pprof: {label}");
        assert!(otlp_strings.iter().any(|s| s == label), "otlp: {label}");
        if label == IDLE {
            // perf script shows the idle task by its command.
            assert!(script.contains("\n[idle] 0/0 [000] "), "{script}");
        } else if label.starts_with("sub_") {
            // A symbol of the table: with its offset, as perf shows symbols.
            assert!(
                script.contains(&format!(" {label}+0x10 (")),
                "perf-script: {label}"
            );
        } else {
            assert!(
                script.contains(&format!(" {label} (")),
                "perf-script: {label}"
            );
        }
    }
    assert!(!script.contains("swapper"), "{script}");
}

/// The otlp export decoded with opentelemetry-proto v1.10.0's types: every
/// sample, its stack's function names, its thread and time are what the
/// recording holds.
#[test]
fn otlp_decodes_with_the_pinned_release() {
    let rec = recording();
    let bytes = otlp::write(&rec);
    let data = ProfilesData::decode(&bytes[..]).expect("ProfilesData of proto v1.10.0");
    let d = data.dictionary.as_ref().unwrap();
    // Every table starts with its zero entry.
    assert_eq!(d.string_table[0], "");
    assert_eq!(d.mapping_table[0], Default::default());
    assert_eq!(d.location_table[0], Default::default());
    assert_eq!(d.function_table[0], Default::default());
    assert_eq!(d.link_table[0], Default::default());
    assert_eq!(d.attribute_table[0], Default::default());
    assert_eq!(d.stack_table[0], Default::default());
    let s = |i: i32| d.string_table[i as usize].as_str();
    // One resource per process: 100 (prog) and 0 ([idle]).
    assert_eq!(data.resource_profiles.len(), 2);
    let mut stacks: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut n = 0;
    let mut weight = 0i64;
    for rp in &data.resource_profiles {
        let attrs: BTreeMap<&str, String> = rp
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| {
                let v = match kv.value.as_ref().unwrap().value.as_ref().unwrap() {
                    Value::IntValue(i) => i.to_string(),
                    Value::StringValue(s) => s.clone(),
                    v => panic!("{v:?}"),
                };
                (kv.key.as_str(), v)
            })
            .collect();
        let pid = &attrs["process.pid"];
        let name = &attrs["process.executable.name"];
        assert!(
            (pid == "100" && name == "prog") || (pid == "0" && name == IDLE),
            "{attrs:?}"
        );
        assert_eq!(rp.scope_profiles.len(), 1);
        let sp = &rp.scope_profiles[0];
        assert_eq!(sp.scope.as_ref().unwrap().name, "profdev");
        assert_eq!(sp.profiles.len(), 1);
        let p = &sp.profiles[0];
        let st = p.sample_type.as_ref().unwrap();
        assert_eq!(
            (s(st.type_strindex), s(st.unit_strindex)),
            ("cpu", "nanoseconds")
        );
        assert_eq!(p.period, 1_000_000);
        assert_eq!(p.time_unix_nano, START);
        assert_eq!(p.profile_id.len(), 16);
        for sample in &p.samples {
            assert_eq!(sample.values.len(), sample.timestamps_unix_nano.len());
            for &t in &sample.timestamps_unix_nano {
                assert!(t >= p.time_unix_nano && t <= p.time_unix_nano + p.duration_nano);
            }
            n += sample.values.len();
            weight += sample.values.iter().sum::<i64>();
            let mut thread = String::new();
            for &a in &sample.attribute_indices {
                let kv = &d.attribute_table[a as usize];
                if s(kv.key_strindex) == "thread.name" {
                    match kv.value.as_ref().unwrap().value.as_ref().unwrap() {
                        Value::StringValue(v) => thread = v.clone(),
                        v => panic!("{v:?}"),
                    }
                }
            }
            let stack = &d.stack_table[sample.stack_index as usize];
            let mut frames: Vec<&str> = stack
                .location_indices
                .iter()
                .map(|&l| {
                    let loc = &d.location_table[l as usize];
                    assert_eq!(loc.lines.len(), 1);
                    s(d.function_table[loc.lines[0].function_index as usize].name_strindex)
                })
                .collect();
            frames.reverse();
            *stacks.entry((thread, frames.join(";"))).or_default() +=
                sample.timestamps_unix_nano.len();
        }
    }
    assert_eq!(n, rec.samples.len());
    assert_eq!(weight, 1_000_000 * rec.samples.len() as i64);
    let get = |thread: &str, st: &str| stacks.get(&(thread.into(), st.into())).copied();
    assert_eq!(get("prog", "main;a;b;c"), Some(5), "{stacks:?}");
    assert_eq!(get("worker", "main;a;b;c"), Some(5), "{stacks:?}");
    assert_eq!(get("prog", &format!("{FAILED};b;c")), Some(3), "{stacks:?}");
    assert_eq!(get(IDLE, "[idle];do_idle"), Some(2), "{stacks:?}");
    assert_eq!(get("prog", "main;sub_1500"), Some(1), "{stacks:?}");
    // Locations keep the address, the mapping and the source line.
    let c = d
        .location_table
        .iter()
        .find(|l| l.address == 0x1404)
        .unwrap();
    assert_eq!(c.lines[0].line, 14);
    let m = &d.mapping_table[c.mapping_index as usize];
    assert_eq!(s(m.filename_strindex), "/opt/t/prog");
    let build_id = &d.attribute_table[m.attribute_indices[0] as usize];
    assert_eq!(s(build_id.key_strindex), "process.executable.build_id.gnu");
    assert_eq!(
        build_id.value.as_ref().unwrap().value,
        Some(Value::StringValue("abcd".into()))
    );
    // Labels have no mapping.
    let idle = d
        .location_table
        .iter()
        .find(|l| {
            l.lines.first().is_some_and(|ln| {
                s(d.function_table[ln.function_index as usize].name_strindex) == IDLE
            })
        })
        .unwrap();
    assert_eq!(idle.mapping_index, 0);
}

/// `write_with` decodes as the collector's `ExportProfilesServiceRequest`:
/// every resource carries the common attributes, a process its own, and
/// the profile spans the time given, its samples' times moved onto the
/// Unix clock.
#[test]
fn otlp_with_a_resource_is_an_export_request() {
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    let rec = recording();
    let t0 = rec.samples.first().unwrap().time;
    let span = otlp::Span {
        start_ns: 2_000_000_000_000,
        end_ns: 2_000_000_000_000 + 15_000_000_000,
        to_unix: 2_000_000_000_000 - t0 + 1,
    };
    let resource = otlp::Resource {
        common: vec![("host.name".into(), "box".into())],
        processes: BTreeMap::from([(100, vec![("container.id".into(), "c0ffee".into())])]),
        span: Some(span),
    };
    let bytes = otlp::write_with(&rec, &resource);
    let req = ExportProfilesServiceRequest::decode(&bytes[..]).expect("request of proto v1.10.0");
    assert_eq!(req.resource_profiles.len(), 2);
    for rp in &req.resource_profiles {
        let attrs: BTreeMap<&str, String> = rp
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| {
                let v = match kv.value.as_ref().unwrap().value.as_ref().unwrap() {
                    Value::IntValue(i) => i.to_string(),
                    Value::StringValue(s) => s.clone(),
                    v => panic!("{v:?}"),
                };
                (kv.key.as_str(), v)
            })
            .collect();
        assert_eq!(attrs["host.name"], "box");
        let container = attrs.get("container.id").map(String::as_str);
        match attrs["process.pid"].as_str() {
            "100" => assert_eq!(container, Some("c0ffee")),
            _ => assert_eq!(container, None),
        }
        let p = &rp.scope_profiles[0].profiles[0];
        assert_eq!(
            (p.time_unix_nano, p.duration_nano),
            (span.start_ns, 15_000_000_000)
        );
        for s in &p.samples {
            for &t in &s.timestamps_unix_nano {
                assert!(t > span.start_ns && t < span.end_ns, "{t}");
            }
        }
    }
}

/// `pprof::encode_with` labels each sample with the common attributes, its
/// process's pid, command and own attributes, and spans the time given.
#[test]
fn pprof_with_a_resource_labels_samples_by_process() {
    use profdev_formats::pprof::Profile;
    let rec = recording();
    let resource = otlp::Resource {
        common: vec![("service_name".into(), "web".into())],
        processes: BTreeMap::from([(100, vec![("container_id".into(), "c0ffee".into())])]),
        span: Some(otlp::Span {
            start_ns: 5_000,
            end_ns: 20_000,
            to_unix: 0,
        }),
    };
    let p = Profile::decode(&pprof::encode_with(&rec, &resource)[..]).unwrap();
    assert_eq!((p.time_nanos, p.duration_nanos), (5_000, 15_000));
    let s = |i: i64| p.string_table[i as usize].as_str();
    let mut count = 0;
    for sample in &p.sample {
        count += sample.value[0];
        let labels: BTreeMap<&str, String> = sample
            .label
            .iter()
            .map(|l| {
                let v = if l.str != 0 {
                    s(l.str).to_string()
                } else {
                    l.num.to_string()
                };
                (s(l.key), v)
            })
            .collect();
        assert_eq!(labels["service_name"], "web");
        match labels["pid"].as_str() {
            "100" => {
                assert_eq!(labels["container_id"], "c0ffee");
                assert_eq!(labels["comm"], "prog");
            }
            "0" => assert_eq!(labels["comm"], IDLE),
            pid => panic!("pid {pid}"),
        }
    }
    assert_eq!(count as usize, rec.samples.len());
}
