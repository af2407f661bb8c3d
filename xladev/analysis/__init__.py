"""The one place that decides what counts as a problem: thresholds, wording and advice.

Both `xladev report` and the runtime's live auto-analysis call these functions, so they are pure:
they take plain numbers (counts, steps, durations in nanoseconds, counter maps) and return text or
`Finding` objects. Nothing here reads files, the environment or the runtime.

- `finding_model`: the `Finding` type, severities, verdict labels and the thresholds every rule shares;
- `auto_metrics`: PyTorch/XLA's auto-metrics analysis (``pt-xla-profiler:`` lines), its exact
  thresholds and wording;
- `recompile_rules`: recompilation told apart from warm-up;
- `compile_rules`: torch.compile's graph breaks and recompilations;
- `diagnoses`: xladev's other diagnoses, each a `Finding` with evidence and a concrete fix, or None;
- `memory_rules`: out of device memory: XLA's out-of-memory messages read, and the finding;
- `input_rules`: findings about the inputs themselves (nothing complete to judge, a damaged file);
- `rank_rules`: diagnoses across the ranks of a job (diverging graphs, a rank recompiling alone, a straggler);
- `api_names`: the advice in the run's own API names;
- `preferences`: which way is better when two runs are compared.

Everything public is importable from `xladev.analysis` itself.
"""

from __future__ import annotations

from xladev.analysis.finding_model import (  # noqa: F401
    headline,
    CACHE_MISS_PER_STEP, COMPILE_FREQUENCY_RATIO, COMPILE_TOO_SLOW_NS, ERROR, EXECUTE_TOO_SLOW_NS,
    FALLBACK_PER_STEP_WARNING, Finding, GRAPH_GROWING, GRAPH_GROWTH_RATIO, HUGE_GRAPH_NODES, INFO,
    ITEM_COUNTER, PENDING_OPS_STEP_FACTOR, PENDING_OPS_WARNING, PROFILER_PREFIX, SETUP_STEPS, SEVERITIES,
    TRANSFER_FREQUENCY_RATIO, UNKNOWN, VERDICT_LABELS, WARMUP_STEPS, WARNING, fallback_remedy, op_base_name,
    severity_rank,
)
from xladev.analysis.auto_metrics import (  # noqa: F401
    auto_metrics_messages, compile_too_frequent_message, fallback_ops, ops_not_lowered_message,
    too_slow_message, transfer_too_frequent_message,
)
from xladev.analysis.recompile_rules import (  # noqa: F401
    COMPILE_BURST, REPEATED_RECOMPILES, RepeatedRecompiles, compile_burst_finding, recompilation_finding,
    recompilation_without_steps, same_inputs_recompile,
)
from xladev.analysis.compile_rules import (  # noqa: F401
    DYNAMO_RECOMPILE, GRAPH_BREAK, break_advice, dynamo_recompile_finding, dynamo_recompile_message,
    graph_break_finding, graph_break_message, guard_advice, parse_dynamo_recompile_message, parse_graph_break_message,
)
from xladev.analysis.general_rules import (  # noqa: F401
    ADVICE_RULES, compile_time_finding, device_data_cache_miss_finding, early_sync_finding, failure_finding,
    fallback_findings, graph_growing_finding, graph_growing_message, graph_growth_finding, healthy_finding,
    host_transfer_finding, huge_graph_finding, never_marked_finding, parse_graph_growing, pending_ops_threshold,
    parse_steady_transfers_line, persistent_cache_advice, rank_divergence_finding, slow_compile_finding,
    slow_execute_finding, steady_transfers_line, undetermined_finding, without_hints,
)
from xladev.analysis.memory_rules import (  # noqa: F401
    HOST_GROWTH_MIN_PER_STEP, HOST_MEMORY_GROWING, MEMORY_GROWING, MEMORY_SPACES, OUT_OF_MEMORY, add_out_of_memory,
    memory_growing_finding, memory_growing_message, out_of_memory_finding, parse_memory_growing, parse_out_of_memory,
)
from xladev.analysis.input_rules import (  # noqa: F401
    NO_COMPLETE_RECORD, damaged_input_finding, no_complete_record_finding, unreadable_input_finding,
)
from xladev.analysis.rank_rules import (  # noqa: F401
    STOPPED_RULES, STRAGGLER_MIN_NS, STRAGGLER_RATIO, graph_divergence_finding, rank_lost_finding,
    rank_recompile_finding, straggler_finding, unfinished_run_finding,
)
from xladev.analysis.api_names import (  # noqa: F401
    ALIAS_COUNTER, TORCH_XLA_API, XLADEV_API, api_line, in_names_of, parse_api_line,
)
from xladev.analysis.preferences import (  # noqa: F401
    LOWER_IS_BETTER, metric_preference,
)
