//! lock-redlock (being written)
