"""Build hook: ship the CUDA C sources of kernels/ inside the wheel, as explorer/_kernels/."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithKernels(build_py):
    """Copy kernels/*.cu (and headers) next to the package, where explorer.gpu looks for them."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "explorer" / "_kernels"
        sources = sorted(Path("kernels").glob("*.cu")) + sorted(Path("kernels").glob("*.cuh"))
        if sources:
            self.mkpath(str(target))
        for source in sources:
            self.copy_file(str(source), str(target / source.name))


setup(cmdclass={"build_py": BuildPyWithKernels})
