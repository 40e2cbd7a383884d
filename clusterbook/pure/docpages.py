"""The docs site's generated sections: the cluster model -> Markdown (pure; every value comes from the cluster).
One name for the pages and the plugin: each section lives in clusterbook/pure/pages/."""

from clusterbook.pure.pages.apipage import (  # noqa: F401 (the sections, by page)
    api,
    on_demand_note,
    quick_start,
    tailnet_access,
    tier_summary,
)
from clusterbook.pure.pages.bringuppages import (  # noqa: F401 (the sections, by page)
    bringup_steps,
    bringup_text,
    deploy_order,
    engine_install,
    keeper_load,
    monitoring,
    prerequisites,
    slurm_asks,
    tier_managers,
    where_alerts_go,
)
from clusterbook.pure.pages.markdown import (  # noqa: F401 (the sections, by page)
    METRICS,
    code,
    gb,
    gib,
    last_changed,
    picture,
    picture_file,
    slot_context,
    slug,
    table,
    tabs,
)
from clusterbook.pure.pages.operatepages import (  # noqa: F401 (the sections, by page)
    DOWNLOAD_SUFFIXES,
    criteria,
    decisions,
    download_path,
    files_index,
    files_verbatim,
    fix_commands,
    maintenance,
    observations,
    owner,
    printable,
    runbook_page,
    ssh_aliases,
    targets,
    troubleshooting,
    when_index,
)
from clusterbook.pure.pages.tierpages import (  # noqa: F401 (the sections, by page)
    architecture,
    capacity,
    hardware,
    models,
    preemption,
    quantization_choice,
    rehearsed_section,
    router,
    tier_flags,
    tier_notes,
    whole_cluster,
)
