// The flame graph's explorer, embedded in the SVG by svg.rs (after a line
// that defines TOTAL, SIDE, USABLE, FRAME_H and CHAR_W): click a frame to
// zoom into it (its width fills the graph, its ancestors span it at half
// opacity, every other frame is hidden); "Reset Zoom" or Escape undoes
// it. "Search" (or Ctrl-F, or /) asks for a regular expression: frames
// whose name it matches turn purple and the share of samples under them is
// shown at the bottom right; clicking "Clear search" or Escape clears it.
// Each frame is a <g data-s="START" data-n="SAMPLES" data-d="DEPTH">
// holding its <title> ("NAME (N samples, P%)"), its <rect> and, when the
// name fits, its <text>; START is the frame's first sample in the graph's
// layout, so a frame's descendants are the deeper frames inside
// [START, START + SAMPLES). Controls are made here, so that a viewer that
// runs no script (an <img>) shows no dead buttons. No external resources.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var script = document.currentScript;
  var svg = (script && script.ownerSVGElement) || document.documentElement;
  var HIGHLIGHT = "rgb(230,0,230)";

  function fixed(v) {
    return v.toFixed(1);
  }

  // Every frame with what zooming and searching need.
  var frames = [];
  var byElement = new Map();
  Array.prototype.forEach.call(svg.querySelectorAll("g[data-s]"), function (g) {
    var title = g.querySelector("title").textContent;
    var rect = g.querySelector("rect");
    var text = g.querySelector("text");
    var f = {
      g: g,
      rect: rect,
      text: text,
      s: Number(g.getAttribute("data-s")),
      n: Number(g.getAttribute("data-n")),
      d: Number(g.getAttribute("data-d")),
      name: title.slice(0, title.lastIndexOf(" (")),
      x: rect.getAttribute("x"),
      width: rect.getAttribute("width"),
      fill: rect.getAttribute("fill"),
      label: text ? text.textContent : null,
      labelX: text ? text.getAttribute("x") : null
    };
    frames.push(f);
    byElement.set(g, f);
  });

  // The name as svg.rs cuts it to fit `width` pixels ("" when under 3 characters fit).
  function label(name, width) {
    var fits = Math.floor((width - 6) / CHAR_W);
    if (fits < 3) {
      return "";
    }
    var chars = Array.from(name);
    return chars.length <= fits ? name : chars.slice(0, fits - 2).join("") + "..";
  }

  function place(f, x, width) {
    f.rect.setAttribute("x", fixed(x));
    f.rect.setAttribute("width", fixed(width));
    var l = label(f.name, width);
    if (!f.text && l !== "") {
      f.text = document.createElementNS(NS, "text");
      var y = Number(f.rect.getAttribute("y"));
      f.text.setAttribute("y", fixed(y + FRAME_H - 4.5));
      f.g.appendChild(f.text);
    }
    if (f.text) {
      f.text.setAttribute("x", fixed(x + 3));
      f.text.textContent = l;
    }
  }

  function control(id, x, y, anchor, text, onclick) {
    var t = document.createElementNS(NS, "text");
    t.setAttribute("id", id);
    t.setAttribute("x", String(x));
    t.setAttribute("y", String(y));
    t.setAttribute("text-anchor", anchor);
    t.setAttribute("class", "control");
    t.textContent = text;
    if (onclick) {
      t.addEventListener("click", function (ev) {
        ev.stopPropagation();
        onclick();
      });
    }
    svg.appendChild(t);
    return t;
  }

  var style = document.createElementNS(NS, "style");
  style.textContent =
    "g[data-s] { cursor: pointer; } g.ancestor rect { fill-opacity: 0.5; } " +
    "text.control { cursor: pointer; fill: rgb(60,60,160); } #matched { cursor: default; fill: rgb(0,0,0); }";
  svg.appendChild(style);

  var width = Number(svg.getAttribute("width"));
  var height = Number(svg.getAttribute("height"));
  var reset = control("reset", SIDE, 24, "start", "Reset Zoom", unzoom);
  reset.setAttribute("display", "none");
  var searchButton = control("search", width - SIDE, 24, "end", "Search", function () {
    if (searching) {
      clearSearch();
    } else {
      ask();
    }
  });
  var matched = control("matched", width - SIDE, height - 5, "end", "", null);
  var searching = false;

  // Zoom into `z`: it fills the graph, its ancestors span it, others hide.
  function zoom(z) {
    frames.forEach(function (f) {
      var inside = f.s >= z.s && f.s + f.n <= z.s + z.n;
      var around = f.s <= z.s && f.s + f.n >= z.s + z.n;
      if (f === z || (f.d > z.d && inside)) {
        f.g.removeAttribute("display");
        f.g.removeAttribute("class");
        place(f, SIDE + (USABLE * (f.s - z.s)) / z.n, (USABLE * f.n) / z.n);
      } else if (f.d < z.d && around) {
        f.g.removeAttribute("display");
        f.g.setAttribute("class", "ancestor");
        place(f, SIDE, USABLE);
      } else {
        f.g.setAttribute("display", "none");
      }
    });
    reset.removeAttribute("display");
  }

  // Back to the whole graph, as written.
  function unzoom() {
    frames.forEach(function (f) {
      f.g.removeAttribute("display");
      f.g.removeAttribute("class");
      f.rect.setAttribute("x", f.x);
      f.rect.setAttribute("width", f.width);
      if (f.text) {
        if (f.label === null) {
          f.g.removeChild(f.text);
          f.text = null;
        } else {
          f.text.setAttribute("x", f.labelX);
          f.text.textContent = f.label;
        }
      }
    });
    reset.setAttribute("display", "none");
  }

  // Highlight the frames whose name `pattern` matches, and show their share.
  function search(pattern) {
    var re;
    try {
      re = new RegExp(pattern);
    } catch (e) {
      clearSearch();
      matched.textContent = "Not a regular expression: " + pattern;
      return;
    }
    var hits = [];
    frames.forEach(function (f) {
      var hit = re.test(f.name);
      f.rect.setAttribute("fill", hit ? HIGHLIGHT : f.fill);
      if (hit) {
        hits.push([f.s, f.s + f.n]);
      }
    });
    // Samples under a match, each once (a match may be inside another).
    hits.sort(function (a, b) {
      return a[0] - b[0];
    });
    var samples = 0;
    var end = 0;
    hits.forEach(function (h) {
      var from = Math.max(h[0], end);
      if (h[1] > from) {
        samples += h[1] - from;
        end = h[1];
      }
    });
    var pct = TOTAL > 0 ? (100 * samples) / TOTAL : 0;
    matched.textContent =
      "Matched: " + pct.toFixed(2) + "% (" + samples + " of " + TOTAL + " samples)";
    searching = true;
    searchButton.textContent = "Clear search";
  }

  function clearSearch() {
    frames.forEach(function (f) {
      f.rect.setAttribute("fill", f.fill);
    });
    matched.textContent = "";
    searching = false;
    searchButton.textContent = "Search";
  }

  function ask() {
    var pattern = window.prompt("Search for functions matching (a regular expression):", "");
    if (pattern) {
      search(pattern);
    }
  }

  svg.addEventListener("click", function (ev) {
    var g = ev.target.closest ? ev.target.closest("g[data-s]") : null;
    if (g && byElement.has(g)) {
      zoom(byElement.get(g));
    }
  });
  window.addEventListener("keydown", function (ev) {
    // Keys typed into a page's own fields (the graph inlined in HTML) are theirs.
    var t = ev.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) {
      return;
    }
    if ((ev.ctrlKey && ev.key === "f") || ev.key === "/") {
      ev.preventDefault();
      ask();
    } else if (ev.key === "Escape") {
      unzoom();
      clearSearch();
    }
  });
})();
