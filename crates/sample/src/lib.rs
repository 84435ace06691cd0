//! Linux sampling engine: perf_event_open, the mmap ring reader, task tracking.
