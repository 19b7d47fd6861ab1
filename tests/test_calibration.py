"""The learned edges' logistic models (scikit-learn underneath): the documented objective is what gets optimised."""
import numpy as np
import pytest
from far.models.calibration import PlattScaler, fit_logistic, logit, predict_logistic


@pytest.mark.parametrize("l2", [1e-2, 1.0, 10.0])
def test_fit_logistic_minimises_the_l2_penalised_loss_without_shrinking_the_bias(l2):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(300, 4))
    labels = (features @ np.array([1.5, -2.0, 0.0, 0.5]) + 0.8 + rng.normal(size=300) > 0).astype(int)
    model = fit_logistic(features, labels, l2=l2)
    p = predict_logistic(model, features)
    weights, bias = model.coef_[0], model.intercept_[0]
    # optimality of sum(log-loss) + l2/2 |w|^2: the weights' gradient is X^T (p - y) + l2 w, the bias's sum(p - y)
    assert np.allclose(features.T @ (p - labels) + l2 * weights, 0.0, atol=1e-3)
    assert abs(np.sum(p - labels)) < 1e-3
    assert p.shape == (300,) and np.all((0 < p) & (p < 1))
    assert bias != 0.0


def test_platt_scaler_is_the_identity_until_fitted_and_then_monotone():
    scaler = PlattScaler()
    raw = np.array([0.1, 0.4, 0.6, 0.9])
    assert np.allclose(scaler(raw), raw)
    scaler.fit([0.2, 0.3, 0.35, 0.7, 0.8, 0.9, 0.4, 0.6], [0, 0, 0, 1, 1, 1, 1, 0])
    calibrated = scaler(raw)
    assert np.all(np.diff(calibrated) > 0) and np.all((0 < calibrated) & (calibrated < 1))
    assert np.allclose(logit(0.5), 0.0)
