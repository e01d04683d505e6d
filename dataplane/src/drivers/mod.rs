pub mod bandwidth;
mod chained;
pub mod tuning;
