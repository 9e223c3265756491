"""Writing the dashboard's model to files: a compressed 2:4 checkpoint, or ONNX for TensorRT.

:class:`_Files` is the part of :class:`explorer.widgets.Dashboard` behind its Save and Export
buttons; each writes in a thread (see :mod:`explorer.widgets.checkpoint_files`) and reports
where it wrote, or why it could not, in the status line.
"""

from __future__ import annotations

import threading

from explorer.widgets._quiet import hidden_displays

__all__: list[str] = []


class _Files:
    """Save and Export: the current model written in a background thread."""

    def save(self, path=None, wait: bool = False) -> threading.Thread | None:
        """Save the current model as a compressed 2:4 checkpoint (in a thread).

        The status line then says where, and the file's size against the dense size;
        :attr:`last_file` holds the :class:`~explorer.widgets.checkpoint_files.WrittenFile`.
        """
        return self._file_job("save", path, wait)

    def export(self, path=None, wait: bool = False) -> threading.Thread | None:
        """Export the current model to ONNX and check it for TensorRT (in a thread)."""
        return self._file_job("export", path, wait)

    def _file_job(self, kind: str, path, wait: bool) -> threading.Thread | None:
        if self.busy:
            self.say("warn", "a run is in progress; wait for it before writing files")
            return None
        if self.bundle is None:
            self.say("warn", "there is no model loaded")
            return None
        self.busy = True
        self._cancel.clear()
        self._emit("busy")
        self._thread = threading.Thread(
            target=self._write_file, args=(kind, path), daemon=True, name=f"explorer-{kind}"
        )
        self._thread.start()
        if wait:
            self._thread.join()
        return self._thread

    def _write_file(self, kind: str, path) -> None:
        from explorer.widgets.checkpoint_files import write_file

        self._wait_for_dense()  # the model may still be loading behind a cached page
        run = self.current
        label = run.config.label if run else "dense"
        try:
            self._progress(0.3, "saving" if kind == "save" else "exporting to ONNX")
            with hidden_displays():
                written = write_file(
                    self.bundle,
                    kind,
                    path,
                    result=run.result if run else None,
                    label=label,
                    cancel=self._cancel,
                    dtype=self.dtype,
                    tokens=self.tokens,
                )
            self.last_file = written
            self._progress(1.0, "done")
            self.say("ok", written.message)
        except Exception as exc:  # the page shows every failure as a message, never a traceback
            self._progress(0.0, "failed")
            self.say("error", f"{kind} failed: {type(exc).__name__}: {exc}")
        finally:
            self.busy = False
            self._emit("busy")
