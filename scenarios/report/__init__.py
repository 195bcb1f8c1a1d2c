"""What a scenario run reports, and the writers of its outputs.

:class:`Report` (:mod:`.record`) is one simulated iteration's results with the typed
setup it was built from; :func:`format_summary` (:mod:`.summary`) the terminal table;
:func:`write_output_dir` (:mod:`.output_dir`) the ``--out DIR`` folder, written by the
registered :class:`ReportWriter` s of :mod:`.writers`, one per output, each drawn by its
own module: Perfetto trace (:mod:`.perfetto`), PNG plots (:mod:`.plots`), ``report.html``
(:mod:`.html_report`, with :mod:`.timelines` and :mod:`.linkmap`).  :mod:`.bottlenecks`
is the critical path and busiest links every report carries; :mod:`.topology_view` the
summary and drawing of a cluster that ``distsim topology`` prints.
"""

from distsim_gpu.scenarios.report.output_dir import OUTPUT_FILES, OutputResult, write_output_dir
from distsim_gpu.scenarios.report.record import (
    GROUP_TOLERANCE,
    GpuGroup,
    Report,
    RunSetup,
    build_report,
    group_gpus,
)
from distsim_gpu.scenarios.report.summary import format_summary, format_table
from distsim_gpu.scenarios.report.writers import (
    WRITERS,
    OutputContext,
    ReportWriter,
    Written,
    register_writer,
    unregister_writer,
)

__all__ = [
    "GROUP_TOLERANCE",
    "OUTPUT_FILES",
    "WRITERS",
    "GpuGroup",
    "OutputContext",
    "OutputResult",
    "Report",
    "ReportWriter",
    "RunSetup",
    "Written",
    "build_report",
    "format_summary",
    "format_table",
    "group_gpus",
    "register_writer",
    "unregister_writer",
    "write_output_dir",
]
