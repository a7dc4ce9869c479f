//! The table formats and their executors: Hive folders, Parquet, Delta, Iceberg, judged by Spark, pyarrow, deltalake and pyiceberg.

mod delta;
mod delta_check;
mod delta_expire;
mod delta_features;
mod iceberg;
mod iceberg_evolved;
mod iceberg_expire;
mod iceberg_policy;
mod iceberg_rest;
mod iceberg_sizing;
mod iceberg_spark;
mod iceberg_versions;
mod merge_kill;
mod parquet;
mod spark;
mod table_formats;
