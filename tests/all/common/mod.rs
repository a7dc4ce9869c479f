#![allow(dead_code)]
// Real processes and servers: waits and timeouts on real time.
#![allow(clippy::disallowed_methods)]
pub mod chaos_support;
pub mod cluster;
pub mod freezer;
pub mod hdfs;
pub mod http;
pub mod iceberg;
pub mod iceberg_rest;
pub mod iceberg_table;
pub mod killat;
pub mod load;
pub mod netns;
pub mod parquet;
pub mod rss;
pub mod runs;
pub mod s3;
pub mod spark;
pub mod table;
pub mod turns;
