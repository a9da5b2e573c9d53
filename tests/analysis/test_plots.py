"""Plot layout: with many runs the legend moves beside the axes so it hides no curve."""

import numpy as np
import pytest

from rs_lightning.analysis.plots import pa_ecdf_figure, plt, save_figure


@pytest.mark.parametrize("count, outside", [(2, False), (8, True)])
def test_legend_is_beside_the_axes_only_for_many_runs(tmp_path, count, outside):
    rng = np.random.default_rng(0)
    fig = pa_ecdf_figure({f"run {i}": rng.uniform(0.5, 1.0, 50) for i in range(count)})
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    axes = ax.get_window_extent()
    assert (legend.x0 >= axes.x1) == outside
    assert len(ax.get_legend().get_texts()) == count
    # the saved PNG (120 dpi, bbox_inches="tight") is wide enough for the axes and the legend together
    scale = 120 / fig.dpi
    saved_width = plt.imread(save_figure(fig, tmp_path / "ecdf.png")).shape[1]
    assert saved_width >= (axes.width + (legend.width if outside else 0)) * scale
