package domain

// ReasonPriorityChanged: a waiting job's priority class was changed (by
// its owner, a lead or an admin); its event keeps the job's state.
const ReasonPriorityChanged Reason = "PriorityChanged"
