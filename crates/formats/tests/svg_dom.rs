//! The flame graph's explorer (svg.rs's embedded flame.js) in a real DOM:
//! headless Chromium loads the SVG of the synthetic recording as a
//! browser opens the file (and once inlined in an HTML page), a test
//! script clicks a frame where it is drawn, resets, searches through the
//! Search button (its prompt answered) and Escape, writing what it sees
//! into the DOM as `key=value` lines; the dumped DOM is checked here.
//! Without Chromium the test is skipped (SKIPPED on stderr), or fails
//! under `PROFDEV_REQUIRE_TOOLS=1` / `PROFDEV_REQUIRE_PRIVILEGED=1`
//! (profdev_testkit::tools), as `.ci/run` sets, which installs chromium.

use profdev_formats::export::svg;
use profdev_formats::recording;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The test's actions and observations, run after the graph's own script.
const ACTIONS: &str = r#"
(function () {
  var out = [];
  function put(k, v) { out.push(k + "=" + v); }
  var svg = document.querySelector("svg");
  function frame(name) {
    var gs = svg.querySelectorAll("g[data-s]");
    for (var i = 0; i < gs.length; i++) {
      var t = gs[i].querySelector("title").textContent;
      if (t.slice(0, t.lastIndexOf(" (")) === name) { return gs[i]; }
    }
    throw new Error("no frame " + name);
  }
  function state(tag, names) {
    names.forEach(function (name) {
      var g = frame(name);
      var r = g.querySelector("rect");
      var t = g.querySelector("text");
      var k = tag + "." + name + ".";
      put(k + "shown", getComputedStyle(g).display !== "none");
      put(k + "x", r.getAttribute("x"));
      put(k + "width", r.getAttribute("width"));
      put(k + "fill", r.getAttribute("fill"));
      put(k + "label", t ? t.textContent : "");
      put(k + "labelx", t ? t.getAttribute("x") : "");
      put(k + "class", g.getAttribute("class") || "");
    });
  }
  function click(el) {
    var r = el.getBoundingClientRect();
    var x = r.left + r.width / 2, y = r.top + r.height / 2;
    el.dispatchEvent(new MouseEvent("click", { bubbles: true, clientX: x, clientY: y }));
  }
  // A click where the frame is drawn, on whatever is drawn there.
  function clickFrame(name) {
    var r = frame(name).querySelector("rect").getBoundingClientRect();
    var x = r.left + r.width / 2, y = r.top + r.height / 2;
    var el = document.elementFromPoint(x, y);
    put("hit." + name, el !== null && el.closest("g[data-s]") === frame(name));
    el.dispatchEvent(new MouseEvent("click", { bubbles: true, clientX: x, clientY: y }));
  }
  function text(id) {
    var e = document.getElementById(id);
    return (getComputedStyle(e).display === "none" ? "hidden:" : "") + e.textContent;
  }
  var all = ["main", "a", "b", "c", "d", "do_syscall_64", "ksys_write", "[unknown]", "[unknown] in prog"];
  try {
    state("start", all);
    put("start.reset", text("reset"));
    put("start.search", text("search"));
    clickFrame("a");
    state("zoom", all);
    put("zoom.a.bbox", frame("a").querySelector("rect").getBBox().width);
    put("zoom.reset", text("reset"));
    click(document.getElementById("reset"));
    state("reset", all);
    put("reset.reset", text("reset"));
    clickFrame("main");
    state("main", ["[unknown] in prog", "[unknown]"]);
    window.prompt = function () { return "^(c|ksys_write)$"; };
    click(document.getElementById("search"));
    state("search", ["c", "ksys_write", "a", "main"]);
    put("search.matched", text("matched"));
    put("search.search", text("search"));
    click(document.getElementById("search"));
    state("cleared", ["c"]);
    put("cleared.matched", text("matched"));
    put("cleared.search", text("search"));
    window.prompt = function () { return "^[abc]$"; };
    click(document.getElementById("search"));
    put("nested.matched", text("matched"));
    window.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape" }));
    state("escape", ["a", "[unknown]", "[unknown] in prog"]);
    put("escape.matched", text("matched"));
    put("escape.reset", text("reset"));
    window.prompt = function () { return "(("; };
    click(document.getElementById("search"));
    put("bad.matched", text("matched"));
  } catch (e) {
    put("error", e + " " + e.stack);
  }
  var d = document.createElementNS("http://www.w3.org/2000/svg", "desc");
  d.setAttribute("id", "result");
  d.textContent = "\n" + out.join("\n") + "\n";
  svg.appendChild(d);
})();
"#;

/// A Chromium that runs here, or None after the testkit's tools gate.
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
    if found.is_none() {
        // Skips, or fails under PROFDEV_REQUIRE_TOOLS / _PRIVILEGED.
        profdev_testkit::tools("the flame graph's explorer in Chromium", &["chromium"]);
    }
    found
}

/// The DOM Chromium has after loading `file`, as it dumps it.
fn dump_dom(browser: &str, file: &Path, dir: &Path) -> String {
    let dumped = dir.join("dom.out");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,900",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", file.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&dumped).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status =
        profdev_testkit::wait_exit("chromium --dump-dom", &mut child, Duration::from_secs(120));
    assert!(status.success(), "chromium: {status}");
    std::fs::read_to_string(&dumped).unwrap()
}

/// The `key=value` lines the actions wrote.
fn results(dom: &str) -> BTreeMap<String, String> {
    let start = dom
        .find("<desc id=\"result\">")
        .unwrap_or_else(|| panic!("no results in the DOM:\n{dom}"));
    let body = &dom[start + "<desc id=\"result\">".len()..];
    let body = &body[..body.find("</desc>").unwrap()];
    let body = body
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    body.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn check(what: &str, r: &BTreeMap<String, String>, original: &BTreeMap<String, String>) {
    let get = |k: &str| {
        r.get(k)
            .unwrap_or_else(|| panic!("{what}: no {k} in {r:#?}"))
            .as_str()
    };
    assert!(!r.contains_key("error"), "{what}: {r:#?}");
    assert_eq!(get("start.reset"), "hidden:Reset Zoom", "{what}");
    assert_eq!(get("start.search"), "Search", "{what}");
    // Zoomed into a: it and its callees fill the graph, main spans it at
    // half opacity, everything else is hidden.
    assert_eq!(get("hit.a"), "true", "{what}: the click lands on a");
    for f in ["a", "b", "c"] {
        assert_eq!(get(&format!("zoom.{f}.shown")), "true", "{what} {f}");
        assert_eq!(get(&format!("zoom.{f}.x")), "10.0", "{what} {f}");
        assert_eq!(get(&format!("zoom.{f}.width")), "1180.0", "{what} {f}");
        assert_eq!(get(&format!("zoom.{f}.class")), "", "{what} {f}");
    }
    assert_eq!(get("zoom.a.bbox"), "1180", "{what}: drawn width");
    assert_eq!(get("zoom.main.shown"), "true", "{what}");
    assert_eq!(get("zoom.main.width"), "1180.0", "{what}");
    assert_eq!(get("zoom.main.class"), "ancestor", "{what}");
    for f in [
        "d",
        "do_syscall_64",
        "ksys_write",
        "[unknown]",
        "[unknown] in prog",
    ] {
        assert_eq!(get(&format!("zoom.{f}.shown")), "false", "{what} {f}");
    }
    assert_eq!(get("zoom.reset"), "Reset Zoom", "{what}");
    // Reset: every frame as written.
    for (k, v) in original {
        if let Some(k) = k.strip_prefix("start.") {
            if k.contains('.') {
                assert_eq!(get(&format!("reset.{k}")), v, "{what}: reset {k}");
            }
        }
    }
    assert_eq!(get("reset.reset"), "hidden:Reset Zoom", "{what}");
    // Zoomed into main (17 of 18 samples), a frame's label is cut anew
    // for its wider rectangle: 1180 * 1/17 = 69.4 px, 9 characters.
    assert_eq!(get("main.[unknown] in prog.width"), "69.4", "{what}");
    assert_eq!(get("main.[unknown] in prog.label"), "[unknow..", "{what}");
    assert_eq!(get("main.[unknown].shown"), "false", "{what}");
    // Search: matches purple, the rest as they were, the matched share.
    assert_eq!(get("search.c.fill"), "rgb(230,0,230)", "{what}");
    assert_eq!(get("search.ksys_write.fill"), "rgb(230,0,230)", "{what}");
    assert_eq!(get("search.a.fill"), get("start.a.fill"), "{what}");
    assert_eq!(get("search.main.fill"), get("start.main.fill"), "{what}");
    assert_eq!(
        get("search.matched"),
        "Matched: 66.67% (12 of 18 samples)",
        "{what}"
    );
    assert_eq!(get("search.search"), "Clear search", "{what}");
    assert_eq!(get("cleared.c.fill"), get("start.c.fill"), "{what}");
    assert_eq!(get("cleared.matched"), "", "{what}");
    assert_eq!(get("cleared.search"), "Search", "{what}");
    // a, b and c are one stack: its samples count once.
    assert_eq!(
        get("nested.matched"),
        "Matched: 55.56% (10 of 18 samples)",
        "{what}"
    );
    // Escape: the whole graph, no search.
    for k in [
        "a.shown",
        "a.width",
        "a.fill",
        "a.labelx",
        "[unknown].shown",
        "[unknown] in prog.label",
    ] {
        assert_eq!(
            get(&format!("escape.{k}")),
            get(&format!("start.{k}")),
            "{what}: escape {k}"
        );
    }
    assert_eq!(get("escape.matched"), "", "{what}");
    assert_eq!(get("escape.reset"), "hidden:Reset Zoom", "{what}");
    assert_eq!(get("bad.matched"), "Not a regular expression: ((", "{what}");
}

#[test]
fn flame_graph_zooms_and_searches_in_chromium() {
    let Some(browser) = chromium() else {
        return;
    };
    let pdrec = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/export/synthetic.pdrec");
    let rec = recording::read(&std::fs::read(pdrec).unwrap()).unwrap();
    let d = tempfile::tempdir().unwrap();
    for inverted in [false, true] {
        let graph = svg::write(
            &rec,
            &svg::Options {
                inverted,
                ..svg::Options::default()
            },
        );
        let with_actions = graph.strip_suffix("</svg>\n").unwrap().to_string()
            + "<script type=\"text/ecmascript\"><![CDATA["
            + ACTIONS
            + "]]></script>\n</svg>\n";
        // The file as a browser opens it.
        let file = d.path().join(format!("flame-{inverted}.svg"));
        std::fs::write(&file, &with_actions).unwrap();
        let r = results(&dump_dom(browser, &file, d.path()));
        let start: BTreeMap<String, String> = r
            .iter()
            .filter(|(k, _)| k.starts_with("start."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(r["start.a.width"], "655.6");
        assert_eq!(r["start.[unknown] in prog.label"], "[unkno..");
        check(&format!("svg file, inverted {inverted}"), &r, &start);
        // The same graph inlined in an HTML page.
        let inline = with_actions
            .split_once("?>\n")
            .map_or(with_actions.as_str(), |(_, svg)| svg);
        let html = d.path().join(format!("flame-{inverted}.html"));
        std::fs::write(
            &html,
            format!("<!DOCTYPE html>\n<html><body>\n{inline}</body></html>\n"),
        )
        .unwrap();
        let r = results(&dump_dom(browser, &html, d.path()));
        check(&format!("html page, inverted {inverted}"), &r, &start);
    }
}
