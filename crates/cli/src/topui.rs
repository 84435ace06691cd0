//! The screen of `profdev top` (ratatui over crossterm): the drawing and
//! the keys, nothing else; the data are `profdev_dev::top::Live`'s.
//!
//! The terminal is put back (raw mode off, the main screen again, the
//! cursor shown) by [`Screen`]'s drop on every return, and by the panic
//! hook `ratatui::init` installs on a panic; a signal is seen by the loop
//! within 100 ms and returns through the same drop.

use anyhow::Result;
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use profdev_dev::top::text::{heads, health_line, row_text, sort_word};
use profdev_dev::top::{Live, Snapshot, Sort, View, Zoom};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{List, ListState, Paragraph};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The terminal in raw mode on the alternate screen, restored when dropped.
struct Screen(ratatui::DefaultTerminal);

impl Drop for Screen {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// What the keys change.
struct State {
    view: View,
    paused: bool,
    list: ListState,
    snap: Snapshot,
}

/// Run the screen until `q` or a signal; returns the signal, or 0.
pub(crate) fn interactive(
    title: String,
    delay: f64,
    callgraph: bool,
    live: &mut Live,
    view: View,
    signal: &AtomicUsize,
) -> Result<usize> {
    let mut screen = Screen(ratatui::try_init()?);
    let every = Duration::from_secs_f64(delay);
    let mut next = Instant::now() + every;
    let mut st = State {
        snap: live.snapshot(&view),
        view,
        paused: false,
        list: ListState::default().with_selected(Some(0)),
    };
    loop {
        let sig = signal.load(Ordering::Relaxed);
        if sig != 0 {
            return Ok(sig);
        }
        if live.failed() || !live.drain_until(Instant::now()) {
            return Ok(0);
        }
        let mut changed = false;
        if Instant::now() >= next {
            if !st.paused {
                st.snap = live.snapshot(&st.view);
                live.decay();
            }
            next = Instant::now() + every;
        }
        screen
            .0
            .draw(|f| draw(f, &title, callgraph, live, &mut st))?;
        if event::poll(Duration::from_millis(100))? {
            if let Event::Key(k) = event::read()? {
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                let ctrl_c =
                    k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c');
                match k.code {
                    _ if ctrl_c => return Ok(0),
                    KeyCode::Char('q') => return Ok(0),
                    KeyCode::Esc if st.view.zoom.is_none() => return Ok(0),
                    KeyCode::Esc | KeyCode::Char('z') | KeyCode::Backspace => {
                        st.view.zoom = None;
                        changed = true;
                    }
                    KeyCode::Char('s') => {
                        st.view.sort = match st.view.sort {
                            Sort::SelfShare => Sort::Total,
                            Sort::Total => Sort::SelfShare,
                        };
                        changed = true;
                    }
                    KeyCode::Char(' ') => st.paused = !st.paused,
                    KeyCode::Down | KeyCode::Char('j') => st.list.select_next(),
                    KeyCode::Up | KeyCode::Char('k') => st.list.select_previous(),
                    KeyCode::Char('p') | KeyCode::Char('m') => {
                        if let Some(r) = st.list.selected().and_then(|i| st.snap.rows.get(i)) {
                            st.view.zoom = Some(if k.code == KeyCode::Char('p') {
                                Zoom::Process(r.pid)
                            } else {
                                Zoom::Module(r.module.clone())
                            });
                            changed = true;
                        }
                    }
                    _ => {}
                }
            }
        }
        if changed {
            st.snap = live.snapshot(&st.view);
            st.list.select(Some(0));
        }
    }
}

fn draw(f: &mut ratatui::Frame, title: &str, callgraph: bool, live: &Live, st: &mut State) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let zoom = match &st.view.zoom {
        None => String::new(),
        Some(Zoom::Process(pid)) => format!(", process {pid}"),
        Some(Zoom::Module(m)) => format!(", module {m}"),
    };
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let lines = vec![
        Line::styled(
            format!(
                "profdev top: {title}, by {}{zoom}{}",
                sort_word(st.view.sort),
                if st.paused { " (paused)" } else { "" }
            ),
            bold,
        ),
        Line::raw(health_line(&live.health())),
        Line::styled(heads(callgraph), bold),
    ];
    f.render_widget(Paragraph::new(lines), head);
    let rows: Vec<String> = st
        .snap
        .rows
        .iter()
        .map(|r| row_text(r, callgraph))
        .collect();
    // Keep a row selected whenever there are rows: a table that was empty
    // for one refresh must not leave the zoom keys with nothing to act on.
    match st.list.selected() {
        Some(i) if i >= rows.len() => st.list.select(rows.len().checked_sub(1)),
        None if !rows.is_empty() => st.list.select(Some(0)),
        _ => {}
    }
    let list = List::new(rows).highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    f.render_stateful_widget(list, body, &mut st.list);
    f.render_widget(
        Paragraph::new("s sort  ↑↓ select  p process  m module  z zoom out  space pause  q quit")
            .style(Style::default().add_modifier(Modifier::DIM)),
        foot,
    );
}
