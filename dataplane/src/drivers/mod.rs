mod chained;
pub mod tuning;
