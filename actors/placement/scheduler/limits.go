package scheduler

// MaxRequiredCores is the most whole cores one job may require
// (Requirements.Cores): the number of core ids a view tracks per node.
// The gateway refuses a larger required_cores at CreateJob, so a job the
// decision would refuse as an invalid ask is never stored.
const MaxRequiredCores = maxCores
