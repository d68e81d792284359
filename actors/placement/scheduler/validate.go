package scheduler

import "fmt"

// validateAsk checks what Select cannot decide on: each error wraps
// ErrInvalidAsk and names the field.
func validateAsk(a *Ask) error {
	if a.Job == "" {
		return fmt.Errorf("%w: job is empty", ErrInvalidAsk)
	}
	if a.Role == "" {
		return fmt.Errorf("%w: role of job %s is empty", ErrInvalidAsk, a.Job)
	}
	if err := validateRequirements("requirements", a.Requirements); err != nil {
		return err
	}
	seen := map[JobID]bool{a.Job: true}
	for i, m := range a.CoLocated {
		field := fmt.Sprintf("co_located[%d]", i)
		switch {
		case m.Job == "":
			return fmt.Errorf("%w: %s.job is empty", ErrInvalidAsk, field)
		case m.Role == "":
			return fmt.Errorf("%w: %s.role of job %s is empty", ErrInvalidAsk, field, m.Job)
		case seen[m.Job]:
			return fmt.Errorf("%w: %s.job %s appears twice in the group", ErrInvalidAsk, field, m.Job)
		}
		seen[m.Job] = true
		if err := validateRequirements(field+".requirements", m.Requirements); err != nil {
			return err
		}
	}
	return nil
}

func validateRequirements(field string, r Requirements) error {
	switch {
	case !validAmount(r.Capacity):
		return fmt.Errorf("%w: %s.capacity is %v, want a finite number of units ≥ 0", ErrInvalidAsk, field, r.Capacity)
	case !validAmount(r.GPUCapacity):
		return fmt.Errorf("%w: %s.gpu_capacity is %v, want a finite number of units ≥ 0", ErrInvalidAsk, field, r.GPUCapacity)
	case r.Cores < 0 || r.Cores > maxCores:
		return fmt.Errorf("%w: %s.cores is %d, want 0 to %d", ErrInvalidAsk, field, r.Cores, maxCores)
	}
	return nil
}
