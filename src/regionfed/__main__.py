from regionfed.cli import main

raise SystemExit(main())
