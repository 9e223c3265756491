"""Build hook: ship the CUDA C and C++ sources of kernels/ inside the wheel, as explorer/_kernels/."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithKernels(build_py):
    """Copy kernels/*.cu, their headers and the C++ operator next to the package (explorer.gpu)."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "explorer" / "_kernels"
        sources = [
            p for ext in ("cu", "cuh", "cpp") for p in sorted(Path("kernels").glob(f"*.{ext}"))
        ]
        if sources:
            self.mkpath(str(target))
        for source in sources:
            self.copy_file(str(source), str(target / source.name))


setup(cmdclass={"build_py": BuildPyWithKernels})
