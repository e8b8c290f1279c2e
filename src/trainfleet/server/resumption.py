"""A restarted server's jobs picked up on a thread of their own, while it already serves.

With thousands of running jobs, adopting them all takes seconds: meanwhile ``/healthz``
answers (the process is alive) and ``/readyz`` says not ready. Requests that read are
served from the store; those that admit, start or stop a job wait until the jobs are
picked up (``Engine.resume_jobs`` holds the admission lock throughout), so none sees a
half-resumed engine; and no new job is stored before the stored ones are read
(``Engine.expect_resume``), so none is queued twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("trainfleet.server")


class Resumption:
    """Runs ``resume`` (which returns the ids of the jobs it adopted) once, on a thread;
    ``failed`` is called, on that thread, with the error if it raises."""

    def __init__(
        self, resume: Callable[[], list[str]], failed: Callable[[BaseException], None]
    ) -> None:
        self._resume = resume
        self._failed = failed
        self._done = threading.Event()
        self.error: BaseException | None = None
        """Why the jobs could not be picked up, if they could not."""
        self._thread = threading.Thread(target=self._run, name="resume", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            resumed = self._resume()
        except BaseException as error:
            self.error = error
            log.error("the unfinished jobs could not be picked up", exc_info=error)
            self._failed(error)
        else:
            if resumed:
                print(f"trainfleet | resumed {len(resumed)} unfinished job(s)", flush=True)
        finally:
            self._done.set()

    def problem(self) -> str | None:
        """Why the server is not ready yet (its jobs are being picked up), or None."""
        if not self._done.is_set():
            return "picking up the unfinished jobs of the last server"
        if self.error is not None:
            return f"the unfinished jobs could not be picked up: {self.error}"
        return None

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it has ended (within ``timeout`` seconds)."""
        return self._done.wait(timeout)
