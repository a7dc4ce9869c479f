//! The backends: the store conformance suite on fs, memory, S3 and HDFS, races, faults, hung and cut-off backends, credentials.

mod credentials;
mod hdfs_faults;
mod hung_backend;
mod netfaults;
mod store_conformance;
mod store_race;
