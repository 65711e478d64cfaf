//! lock-zk (being written)
