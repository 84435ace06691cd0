//! The device layer: the Dev trait, file trees as data, ctl tables, one file per classic device.
