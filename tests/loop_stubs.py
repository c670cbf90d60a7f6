"""A stand-in data source for `trainers.loop.run_loop` tests."""


class Steps:
    """A checkpointable source of `total_steps` items (the loop's Source protocol): items 1, 2, ...; its state is
    the step reached."""

    def __init__(self, total_steps):
        self.step, self.total_steps = 0, total_steps

    def __iter__(self):
        return self

    def __next__(self):
        if self.step >= self.total_steps:
            raise StopIteration
        self.step += 1
        return self.step

    def get_state(self):
        return {"step": self.step}

    def set_state(self, state):
        self.step = int(state["step"])
