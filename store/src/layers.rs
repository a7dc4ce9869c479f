//! OpenDAL layers for tests and benchmarks: operation counting and seeded
//! fault injection. (Being written.)
