import torch

from edgeosc.dynamics import convergence_study, integrate, random_unit


def test_closed_form_is_the_integrated_equilibrium_and_faster_with_d_osc():
    reports = [convergence_study(d, n=400, delta=0.2, seed=3) for d in (2, 3, 8, 32)]
    for rep in reports:
        assert rep.max_rel_error <= 1e-4, rep
    times = [rep.mean_time for rep in reports]
    assert times == sorted(times, reverse=True) and times[0] > 1.2 * times[-1], times
    # both failure modes become rarer as d_osc grows
    assert reports[0].p_small_h > reports[2].p_small_h == 0.0
    assert reports[0].p_near_antipode > reports[2].p_near_antipode


def test_trajectory_stays_on_sphere_and_antipode_is_unstable_fixed_point():
    g = torch.Generator().manual_seed(0)
    h = random_unit(3, 4, generator=g) * 2
    z, t = integrate(-h / h.norm(dim=-1, keepdim=True), h, t_max=5.0)
    assert t.isinf().all()  # exactly at -z*: the tangent field vanishes, no motion
    z, t = integrate(random_unit(3, 4, generator=g), h, t_max=20.0)
    torch.testing.assert_close(z.norm(dim=-1), torch.ones(3, dtype=torch.float64))
    assert t.isfinite().all()
