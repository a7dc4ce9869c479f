//! Tasks, jobs, schedules and policies: submit to Done, the fences that guard units, commands and their limits.

mod commands;
mod end_to_end;
mod guard;
mod io_limit;
mod jobs;
mod limits;
mod policies;
mod schedules;
mod task_list;
mod task_regressions;
