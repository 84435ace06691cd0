//! profil(2) and monitor(3C) for Rust and C programs.
