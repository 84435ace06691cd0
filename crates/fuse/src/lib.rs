//! The FUSE file server over the device table.
