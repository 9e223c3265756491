"""Writing the dashboard's model to files: a compressed 2:4 checkpoint, or ONNX for TensorRT.

:class:`Files` is the part of :class:`explorer.widgets.Dashboard` behind its Save and Export
buttons; each writes in a thread (see :mod:`explorer.widgets.checkpoint_files`) and reports
where it wrote, or why it could not, in the status line.
"""

from __future__ import annotations

import threading

from explorer.widgets._quiet import hidden_displays

__all__ = ["Files"]


class Files:
    """Save and Export: the current model written in a background thread.

    Parameters
    ----------
    state : DashboardState
    events : Events
    loader : Loader
        Writing waits for its load job.
    """

    def __init__(self, state, events, loader) -> None:
        self.state, self.events, self.loader = state, events, loader

    def save(self, path=None, wait: bool = False) -> threading.Thread | None:
        """Save the current model as a compressed 2:4 checkpoint (in a thread).

        The status line then says where, and the file's size against the dense size;
        ``state.last_file`` holds the :class:`~explorer.widgets.checkpoint_files.WrittenFile`.

        Parameters
        ----------
        path : str or pathlib.Path, optional
            The file; None for a default file in the cache folder.
        wait : bool, optional
            Block until the file is written.

        Returns
        -------
        threading.Thread or None
            The writing thread; None when a job is running or no model is loaded.
        """
        return self._file_job("save", path, wait)

    def export(self, path=None, wait: bool = False) -> threading.Thread | None:
        """Export the current model to ONNX and check it for TensorRT (in a thread).

        Parameters
        ----------
        path : str or pathlib.Path, optional
            The file; None for a default file in the cache folder.
        wait : bool, optional
            Block until the file is written.

        Returns
        -------
        threading.Thread or None
            The writing thread; None when a job is running or no model is loaded.
        """
        return self._file_job("export", path, wait)

    def _file_job(self, kind: str, path, wait: bool) -> threading.Thread | None:
        state = self.state
        if state.busy:
            self.events.say("warn", "a run is in progress; wait for it before writing files")
            return None
        if state.bundle is None:
            self.events.say("warn", "there is no model loaded")
            return None
        state.busy = True
        state.cancel.clear()
        self.events.emit("busy")
        state.job = threading.Thread(
            target=self._write_file, args=(kind, path), daemon=True, name=f"explorer-{kind}"
        )
        state.job.start()
        if wait:
            state.job.join()
        return state.job

    def _write_file(self, kind: str, path) -> None:
        from explorer.widgets.checkpoint_files import write_file

        state, events = self.state, self.events
        self.loader.wait()  # the model may still be loading behind a cached page
        run = state.current
        label = run.config.label if run else "dense"
        try:
            events.report(0.3, "saving" if kind == "save" else "exporting to ONNX")
            with hidden_displays():
                written = write_file(
                    state.bundle,
                    kind,
                    path,
                    result=run.result if run else None,
                    label=label,
                    cancel=state.cancel,
                    dtype=state.dtype,
                    tokens=state.tokens,
                )
            state.last_file = written
            events.report(1.0, "done")
            events.say("ok", written.message)
        except Exception as exc:  # the page shows every failure as a message, never a traceback
            events.report(0.0, "failed")
            events.say("error", f"{kind} failed: {type(exc).__name__}: {exc}")
        finally:
            state.busy = False
            events.emit("busy")

    def __repr__(self) -> str:
        return f"Files(last={self.state.last_file!r})"
