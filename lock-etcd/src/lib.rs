//! lock-etcd (being written)
