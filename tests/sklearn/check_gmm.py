# SPDX-License-Identifier: Apache-2.0
"""eacgm's Gmm (Armadillo's gmm_full / gmm_diag EM, src/detect/gmm.cpp)
against scikit-learn's GaussianMixture: same data, same number of components,
same initial parameters (sklearn: weights_init / means_init / precisions_init;
Armadillo: set_params + keep_existing, no k-means), same number of EM
iterations. Asserts that the fitted models' log-likelihoods agree to 1e-3
relative, and that eacgm's density code reproduces sklearn's score_samples
under sklearn's fitted parameters.

Regularisation differs in kind: sklearn adds reg_covar to every variance,
Armadillo floors each variance at var_floor. Both are set to 1e-10, far below
these data's variances, so neither changes the fit.

Usage: check_gmm.py PATH/TO/gmm_fit    (ctest: sklearn.gmm_agreement)"""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

TOOL = sys.argv[1]
EM_ITER = 100
FLOOR = 1e-10


def data(seed=0, n=3000):
    rng = np.random.default_rng(seed)
    means = np.array([[0, 0, 0], [5, 1, -2], [-3, 6, 2]], float)
    covs = np.array([[[1, .5, 0], [.5, 1, .2], [0, .2, .5]],
                     [[.5, 0, 0], [0, 2, .3], [0, .3, 1]],
                     [[1.5, -.6, 0], [-.6, .8, 0], [0, 0, 2]]], float)
    w = np.array([.5, .3, .2])
    z = rng.choice(3, size=n, p=w)
    X = np.stack([rng.multivariate_normal(means[k], covs[k]) for k in z])
    # Deliberately off initial parameters, so EM has work to do.
    init = {"means": means + rng.normal(0, 0.7, means.shape),
            "covs": np.stack([np.eye(3) * 1.5] * 3),
            "weights": np.array([1 / 3] * 3)}
    return X, init


def run_tool(payload):
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.json"), os.path.join(d, "out.json")
        with open(inp, "w") as f:
            json.dump(payload, f)
        subprocess.run([TOOL, inp, out], check=True)
        with open(out) as f:
            return json.load(f)


def check(cov_type):
    X, init = data()
    ours = run_tool({"X": X.tolist(), "means": init["means"].tolist(), "covs": init["covs"].tolist(),
                     "weights": init["weights"].tolist(), "covariance": cov_type, "em_iter": EM_ITER,
                     "var_floor": FLOOR})
    if cov_type == "full":
        prec = np.stack([np.linalg.inv(c) for c in init["covs"]])
    else:
        prec = np.stack([1 / np.diag(c) for c in init["covs"]])
    gm = GaussianMixture(n_components=3, covariance_type=cov_type, weights_init=init["weights"],
                         means_init=init["means"], precisions_init=prec, reg_covar=FLOOR, max_iter=EM_ITER,
                         tol=0, n_init=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol=0: it always runs max_iter
        gm.fit(X)
    sk_ll = gm.score(X)
    rel = abs(ours["avg_log_likelihood"] - sk_ll) / abs(sk_ll)
    mean_diff = np.abs(np.array(ours["means"]) - gm.means_).max()
    w_diff = np.abs(np.array(ours["weights"]) - gm.weights_).max()
    print("%s: mean log-likelihood eacgm %.10f sklearn %.10f (relative difference %.2e); "
          "max |mean diff| %.2e, max |weight diff| %.2e" % (cov_type, ours["avg_log_likelihood"], sk_ll, rel,
                                                             mean_diff, w_diff))
    assert rel <= 1e-3, "log-likelihoods differ by %.3g relative" % rel
    assert mean_diff <= 1e-3 and w_diff <= 1e-3, "parameters differ"

    # The density code alone: sklearn's fitted parameters, scored by eacgm.
    covs = gm.covariances_ if cov_type == "full" else np.stack([np.diag(v) for v in gm.covariances_])
    scored = run_tool({"X": X[:10].tolist(), "means": gm.means_.tolist(), "covs": covs.tolist(),
                       "weights": gm.weights_.tolist(), "covariance": cov_type, "params_only": True,
                       "eval": X[:1000].tolist()})
    err = np.abs(np.array(scored["eval_log_likelihood"]) - gm.score_samples(X[:1000])).max()
    print("%s: per-event log-likelihood under sklearn's parameters, max |difference| %.2e" % (cov_type, err))
    assert err <= 1e-9, "density code differs by %g" % err


for t in ("full", "diag"):
    check(t)
print("ok")
